package systest

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/internal/check"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/l1"
	"github.com/leafline/leafline/topology"
)

// deployFiles are the dashboards and alert rules shipped in deploy/.
func deployFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"../deploy/prometheus/*rules*.yml", "../deploy/grafana/*.json"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 2 {
		t.Fatalf("found %v in deploy/: want the rules and at least one dashboard", files)
	}
	return files
}

// TestDeploy_PromtoolCheckRules validates the alert rules with promtool.
func TestDeploy_PromtoolCheckRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("LEAFLINE_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("no promtool on PATH and LEAFLINE_REQUIRE_PROMTOOL=1 (apt-get install -y prometheus)")
		}
		t.Skip("no promtool on PATH (apt-get install -y prometheus); set LEAFLINE_REQUIRE_PROMTOOL=1 to fail instead")
	}
	rules, _ := filepath.Glob("../deploy/prometheus/*rules*.yml")
	if len(rules) == 0 {
		t.Fatal("no rules file in deploy/prometheus")
	}
	out, err := exec.Command(promtool, append([]string{"check", "rules"}, rules...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestDeploy_PromtoolTestRules runs the alert rules' unit tests shipped
// beside them (deploy/prometheus/*_test.yml): e.g. that a filling stream
// is alerted on before it refuses anything.
func TestDeploy_PromtoolTestRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("LEAFLINE_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("no promtool on PATH and LEAFLINE_REQUIRE_PROMTOOL=1 (apt-get install -y prometheus)")
		}
		t.Skip("no promtool on PATH (apt-get install -y prometheus); set LEAFLINE_REQUIRE_PROMTOOL=1 to fail instead")
	}
	tests, _ := filepath.Glob("../deploy/prometheus/*_test.yml")
	if len(tests) == 0 {
		t.Fatal("no rules test in deploy/prometheus")
	}
	for _, f := range tests {
		cmd := exec.Command(promtool, "test", "rules", filepath.Base(f))
		cmd.Dir = filepath.Dir(f)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool test rules %s: %v\n%s", f, err, out)
		}
	}
}

var metricName = regexp.MustCompile(`\bleafline_[a-z0-9_]+`)

// TestDeploy_MetricsExist checks that every metric the dashboards and the
// alert rules name is exported by a running system's boxes (L1, hub, edge)
// once events have flowed.
func TestDeploy_MetricsExist(t *testing.T) {
	// Both transports, so that both export their metrics: edge1's link by
	// the relay, the hub's by sourcing.
	ls := testSystemWith(t, Options{Edges: 1, Configure: func(c *topology.Config) {
		c.DeadLetter.Enabled = true
		withTransport(topology.TransportSourcing, topology.TransportRelay)(c)
	}}, func(site string) leafline.Options {
		if site == "l1" {
			return leafline.Options{L1: []l1.Option{l1.WithConsoleSampleEvery(200 * time.Millisecond)}}
		}
		return leafline.Options{}
	})
	ids := publishN(t, jstest.ConnectURL(t, ls.App("l1").ClientURL()), "m", 3)
	waitCompleted(t, ls, ids, "edge1")
	exported := map[string]bool{}
	check.For(t, 10*time.Second, 50*time.Millisecond, func() error {
		for _, s := range ls.Topology.Sites {
			for _, n := range scrapeNames(t, ls.App(s.Name).OpsAddr()) {
				exported[n] = true
			}
		}
		if !exported["leafline_site_pending"] {
			return errNotYet("the console's first sample")
		}
		return nil
	})
	for _, f := range deployFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") && !json.Valid(b) {
			t.Errorf("%s is not valid JSON", f)
		}
		seen := map[string]bool{}
		for _, n := range metricName.FindAllString(string(b), -1) {
			if !seen[n] && !exported[n] {
				t.Errorf("%s names %s, which no box exports", filepath.Base(f), n)
			}
			seen[n] = true
		}
		if len(seen) == 0 {
			t.Errorf("%s names no leafline metric", f)
		}
	}
	if t.Failed() || testing.Verbose() {
		var names []string
		for n := range exported {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Logf("exported: %s", strings.Join(names, " "))
	}
}

// scrapeNames returns the metric names a box's /metrics exposes.
func scrapeNames(t *testing.T, addr string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var names []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names = append(names, line[:i])
		}
	}
	return names
}

type errNotYet string

func (e errNotYet) Error() string { return "waiting for " + string(e) }
