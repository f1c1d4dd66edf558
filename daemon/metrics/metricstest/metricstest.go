// Package metricstest reads a daemon's HTTP endpoints — Prometheus metrics,
// the status page's API, profiles — for tests: one GET helper and one
// metrics parser instead of a copy in every package's tests. Each function
// fails the test it is given when the request cannot be made.
package metricstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// timeout bounds one request.
const timeout = 10 * time.Second

// Fetch GETs url, sending bearer as an Authorization bearer token unless it
// is empty, and returns the answer's status code and body, whatever the
// status.
func Fetch(t testing.TB, url, bearer string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.StatusCode, string(b)
}

// Get GETs url and returns the body, failing t unless the answer is
// 200 OK.
func Get(t testing.TB, url string) string {
	t.Helper()
	code, body := Fetch(t, url, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s: %s", url, code, http.StatusText(code), body)
	}
	return body
}

// Scrape GETs url and parses the answer as Prometheus text, by metric
// family name.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := TryScrape(url)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TryScrape is Scrape returning its error rather than failing a test: for
// a poll that asks again while a loaded daemon answers late.
func TryScrape(url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", url, err)
	}
	return fams, nil
}

// Value is the value of the first sample of family name whose labels
// include every one of want ("k=v" pairs), and whether there is one: a
// counter's or a gauge's value, a histogram's sample count.
func Value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// hasLabels reports whether m carries every "k=v" label of want.
func hasLabels(m *dto.Metric, want []string) bool {
	for _, kv := range want {
		k, v, _ := strings.Cut(kv, "=")
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
