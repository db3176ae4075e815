package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/rest"
)

// apiRequests counts the API server's requests by verb and resource
// ("CREATE ratelimitpolicies", "PATCH ratelimitpolicies/status"), from its
// apiserver_request_total.
type apiRequests map[string]float64

// readAPIRequests scrapes the API server's metrics.
func readAPIRequests(ctx context.Context, cfg *rest.Config) (apiRequests, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("the API server's metrics: %s", resp.Status)
	}
	out := apiRequests{}
	err = eachSample(resp.Body, "apiserver_request_total", func(l map[string]string, n float64) {
		what := l["resource"]
		if l["subresource"] != "" {
			what += "/" + l["subresource"]
		}
		out[l["verb"]+" "+what] += n
	})
	return out, err
}

// reconciles reads how many reconciles the controller's policy
// reconciler ran, from its metrics at addr.
func reconciles(ctx context.Context, addr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var total float64
	err = eachSample(resp.Body, "controller_runtime_reconcile_total", func(l map[string]string, n float64) {
		if l["controller"] == "ratelimitpolicy" {
			total += n
		}
	})
	return total, err
}

// eachSample calls f with the labels and value of each sample of the
// metric name on a /metrics page.
func eachSample(page io.Reader, name string, f func(labels map[string]string, value float64)) error {
	sc := bufio.NewScanner(page)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		labels, ok := strings.CutPrefix(sc.Text(), name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseFloat(value, 64); err == nil {
			f(parseLabels(labels), n)
		}
	}
	return sc.Err()
}

// parseLabels reads a Prometheus sample's labels (name="value",...).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			break
		}
		value, rest, _ := strings.Cut(rest, `"`)
		out[name] = value
		s = strings.TrimPrefix(rest, ",")
	}
	return out
}

// writesSince lists the write requests (not GET, LIST or WATCH) made from
// before to r, per policy, most first.
func (r apiRequests) writesSince(before apiRequests, policies int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		verb, _, _ := strings.Cut(k, " ")
		n := r[k] - before[k]
		if n < 1 || verb == "GET" || verb == "LIST" || verb == "WATCH" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f (%.2f a policy)", k, n, n/float64(policies)))
	}
	return strings.Join(parts, ", ")
}
