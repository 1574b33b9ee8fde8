package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// metricsPrefix selects leafline's own families; the Go runtime and
// process collectors' families are left out.
const metricsPrefix = "leafline_"

// maxMetricsBody bounds what cmdMetrics reads from /metrics.
const maxMetricsBody = 32 << 20

// cmdMetrics fetches the running box's /metrics from its ops address and
// prints the leafline_* samples as a table, or as JSON with --json.
//
// The table prints the labels that every sample shares (site, role) once,
// above the rows; each row is name, remaining labels, value. Histograms and
// summaries are shown by their count and sum.
func cmdMetrics(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("metrics", stderr)
	path := fs.String("config", "", "box config `FILE` (its ops.listen is where the box serves /metrics)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	url := fs.String("url", "", "fetch this metrics `URL` instead of http://<ops.listen>/metrics")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if !parse(fs, args, 0, stderr) {
		return exitUsage
	}
	cfg, ok := loadConfig(fs, *path, stderr)
	if !ok {
		return exitUsage
	}
	if *timeout <= 0 || *timeout > time.Hour {
		fmt.Fprintf(stderr, "leafline metrics: --timeout must be in (0, 1h], got %s\n", *timeout)
		return exitUsage
	}
	target := *url
	if target == "" {
		var err error
		if target, err = metricsURL(cfg.Ops.Listen); err != nil {
			fmt.Fprintf(stderr, "leafline metrics: ops.listen: %v\n", err)
			return exitUsage
		}
	}
	fctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	fams, err := fetchMetrics(fctx, target)
	if err != nil {
		fmt.Fprintf(stderr, "leafline metrics: %v\n", err)
		return exitFailure
	}
	samples := flattenMetrics(fams)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(metricsReport{Source: target, Metrics: samples}); err != nil {
			fmt.Fprintf(stderr, "leafline metrics: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	if err := writeMetricsTable(stdout, samples); err != nil {
		fmt.Fprintf(stderr, "leafline metrics: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// metricsURL turns an ops.listen address into the /metrics URL. An
// unspecified or empty host (the box listens on every interface) is
// reached on loopback.
func metricsURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return "", fmt.Errorf("port %q is not a fixed port; pass --url", port)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics", nil
}

func fetchMetrics(ctx context.Context, url string) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("is the box running? %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	dec := expfmt.NewDecoder(io.LimitReader(resp.Body, maxMetricsBody), expfmt.ResponseFormat(resp.Header))
	var fams []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, fmt.Errorf("GET %s: cannot parse metrics: %w", url, err)
		}
		if strings.HasPrefix(mf.GetName(), metricsPrefix) {
			fams = append(fams, mf)
		}
	}
}

// metricSample is one sample in the --json output. Value is set for
// counters, gauges and untyped metrics (a number, or "NaN", "+Inf", "-Inf");
// Count and Sum for histograms and summaries.
type metricSample struct {
	Name   string            `json:"name"`
	Type   string            `json:"type"`
	Help   string            `json:"help,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  any               `json:"value,omitempty"`
	Count  *uint64           `json:"count,omitempty"`
	Sum    any               `json:"sum,omitempty"`
}

type metricsReport struct {
	Source  string         `json:"source"`
	Metrics []metricSample `json:"metrics"`
}

// jsonNumber keeps finite values numbers and spells out the others, which
// JSON cannot carry.
func jsonNumber(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return formatValue(v)
	}
	return v
}

func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// flattenMetrics turns the families into samples, sorted by name and labels.
func flattenMetrics(fams []*dto.MetricFamily) []metricSample {
	var out []metricSample
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			s := metricSample{Name: mf.GetName(), Type: strings.ToLower(mf.GetType().String()), Help: mf.GetHelp()}
			if len(m.GetLabel()) > 0 {
				s.Labels = make(map[string]string, len(m.GetLabel()))
				for _, lp := range m.GetLabel() {
					s.Labels[lp.GetName()] = lp.GetValue()
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s.Value = jsonNumber(m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				s.Value = jsonNumber(m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				c := m.GetHistogram().GetSampleCount()
				s.Count, s.Sum = &c, jsonNumber(m.GetHistogram().GetSampleSum())
			case dto.MetricType_SUMMARY:
				c := m.GetSummary().GetSampleCount()
				s.Count, s.Sum = &c, jsonNumber(m.GetSummary().GetSampleSum())
			default:
				s.Value = jsonNumber(m.GetUntyped().GetValue())
			}
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b metricSample) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(labelString(a.Labels, nil), labelString(b.Labels, nil))
	})
	return out
}

// labelString renders labels as k=v pairs sorted by key, leaving out skip.
func labelString(labels map[string]string, skip map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		if _, ok := skip[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(labels[k])
	}
	return strings.Join(parts, ",")
}

// commonLabels are the label pairs every sample carries with one value.
func commonLabels(samples []metricSample) map[string]string {
	if len(samples) == 0 {
		return nil
	}
	common := map[string]string{}
	for k, v := range samples[0].Labels {
		common[k] = v
	}
	for _, s := range samples[1:] {
		for k, v := range common {
			if s.Labels[k] != v {
				delete(common, k)
			}
		}
	}
	return common
}

func writeMetricsTable(w io.Writer, samples []metricSample) error {
	if len(samples) == 0 {
		_, err := fmt.Fprintln(w, "no leafline_* metrics")
		return err
	}
	common := commonLabels(samples)
	if len(common) > 0 {
		if _, err := fmt.Fprintf(w, "%s\n\n", strings.ReplaceAll(labelString(common, nil), ",", " ")); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLABELS\tVALUE")
	for _, s := range samples {
		labels := labelString(s.Labels, common)
		if labels == "" {
			labels = "-"
		}
		var value string
		if s.Count != nil {
			value = fmt.Sprintf("count=%d sum=%s", *s.Count, anyValue(s.Sum))
		} else {
			value = anyValue(s.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, labels, value)
	}
	return tw.Flush()
}

func anyValue(v any) string {
	switch x := v.(type) {
	case float64:
		return formatValue(x)
	case string:
		return x
	case nil:
		return "0"
	}
	return fmt.Sprint(v)
}
