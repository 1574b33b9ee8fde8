package topology

import (
	"strings"
	"testing"
)

func TestParseBandwidth(t *testing.T) {
	good := map[string]int64{
		"64KB/s":   64_000,
		"64kB/s":   64_000,
		"64KiB/s":  65_536,
		"1.5MB/s":  1_500_000,
		"1MiB/s":   1 << 20,
		"2GB/s":    2_000_000_000,
		"1GiB/s":   1 << 30,
		"512B/s":   512,
		"1B/s":     1,
		"0.5KB/s":  500,
		"off":      0,
		"0B/s":     0,
		"1000GB/s": 1e12,
	}
	for in, want := range good {
		got, err := ParseBandwidth(in)
		if err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := map[string]string{
		"64000":     "write a rate in bytes a second",
		"64KB":      "write a rate in bytes a second",
		"64 KB/s":   `unit " KB"`,
		"64kb/s":    "is in bits",
		"64Mbit/s":  "is in bits",
		"64kbps/s":  "is in bits",
		"64XB/s":    `unit "XB"`,
		"64/s":      `unit ""`,
		"KB/s":      "must start with a number",
		"-1KB/s":    "must start with a number",
		"1.2.3KB/s": `"1.2.3" is not a number`,
		"0.4B/s":    "less than 1 byte a second",
		"2TB/s":     `unit "TB"`,
		"1001GB/s":  "above 1TB/s",
		"Off":       "write a rate",
	}
	for in, want := range bad {
		if _, err := ParseBandwidth(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseBandwidth(%q): error %v, want one containing %q", in, err, want)
		}
	}
}

func FuzzParseBandwidth(f *testing.F) {
	for _, s := range []string{"64KB/s", "1.5MiB/s", "off", "0B/s", "9e9GB/s", ".B/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseBandwidth(s)
		if err == nil && (v < 0 || v > maxBandwidth) {
			t.Fatalf("ParseBandwidth(%q) = %d, outside 0..1TB/s", s, v)
		}
		if err != nil && v != 0 {
			t.Fatalf("ParseBandwidth(%q) = %d with error %v", s, v, err)
		}
	})
}

func TestTopology_Bandwidth_Bad(t *testing.T) {
	relay := func(tp *Topology) { tp.Transport = TransportRelay }
	tests := []topologyCase{
		{"bad default", func(tp *Topology) { tp.Bandwidth = "64kbps" }, "bandwidth", `"64kbps" is not a bandwidth`},
		{"bad on a link", func(tp *Topology) { tp.Sites[2].Bandwidth = "64kb/s" }, "sites[2].bandwidth", `site edge1: "64kb/s" is in bits`},
		{"no unit", func(tp *Topology) { tp.Sites[1].Bandwidth = "64000" }, "sites[1].bandwidth", `site hub: "64000" is not a bandwidth`},
		{"on l1", func(tp *Topology) { tp.Sites[0].Bandwidth = "64KB/s" }, "sites[0].bandwidth", "site l1: an l1 site has no upstream link to cap"},
		{"on a sourcing link", func(tp *Topology) {
			tp.Sites[2].Transport = TransportSourcing
			tp.Sites[2].Bandwidth = "64KB/s"
		}, "sites[2].bandwidth", "link hub-edge1: a cap of 64000 bytes/s on a link whose transport is sourcing"},
		{"default on a sourcing link", func(tp *Topology) {
			tp.Bandwidth = "1MiB/s"
			tp.Sites[3].Transport = TransportSourcing
		}, "bandwidth", `link hub-edge2: a cap of 1048576 bytes/s on a link whose transport is sourcing, which nats-server moves and leafline cannot cap: use transport relay on this link, or bandwidth "off" on site edge2`},
		{"direct edge", func(tp *Topology) {
			relay(tp)
			tp.Sites[2].DeliveryMode = DeliveryDirect
			tp.Sites[2].Bandwidth = "64KB/s"
		}, "sites[2].bandwidth", "edge edge1 is in direct delivery mode"},
		{"hub above a direct edge", func(tp *Topology) {
			relay(tp)
			tp.Sites[2].DeliveryMode = DeliveryDirect
			tp.Sites[1].Bandwidth = "64KB/s"
		}, "sites[1].bandwidth", "link l1-hub: a cap of 64000 bytes/s, but edge edge1 is in direct delivery mode"},
	}
	wantTopologyProblems(t, tests)
}

func TestTopology_LinkBandwidth(t *testing.T) {
	tp := exampleTopology(t)
	tp.Bandwidth = "64KB/s"
	tp.Sites[1].Bandwidth = BandwidthOff // the hub's link to L1
	tp.Sites[3].Bandwidth = "1MiB/s"
	// The default lifted on a sourcing link is no cap there: valid.
	tp.Sites[1].Transport = TransportSourcing
	got, err := ParseTopology(mustMarshal(t, tp), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"l1": 0, "hub": 0, "edge1": 64_000, "edge2": 1 << 20}
	for name, w := range want {
		s, _ := got.Site(name)
		if g := got.LinkBandwidth(s); g != w {
			t.Errorf("LinkBandwidth(%s) = %d, want %d", name, g, w)
		}
	}
	plain, err := ParseTopology(mustMarshal(t, exampleTopology(t)), "topology.json")
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain.Sites {
		if g := plain.LinkBandwidth(&plain.Sites[i]); g != 0 {
			t.Errorf("no setting: LinkBandwidth(%s) = %d, want 0", plain.Sites[i].Name, g)
		}
	}
}
