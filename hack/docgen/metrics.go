package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-dev/sluice/internal/buildinfo"
	"github.com/sluice-dev/sluice/internal/checkstack"
	"github.com/sluice-dev/sluice/internal/connlimit"
	_ "github.com/sluice-dev/sluice/internal/controller" // registers the table sync's metrics
	"github.com/sluice-dev/sluice/internal/decisionlog"
	"github.com/sluice-dev/sluice/internal/grpcserver"
)

// The metrics page is made from the collectors themselves: a check
// process's pieces are assembled as the process assembles them, into a
// fresh registry, and the controller's are read from controller-runtime's
// registry, where they register.

// metric is one metric family as the page lists it.
type metric struct {
	name, typ, help string
	labels          []string
}

// recorder registers collectors in a registry and keeps them, so that a
// vector with no child yet (absent from Gather) is still described.
type recorder struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// checkMetrics are a check process's metrics: its stack (the checker and
// the decision log), the HTTP and gRPC endpoints' connections, the gRPC
// answers and the build information.
func checkMetrics() ([]metric, error) {
	rec := &recorder{Registry: prometheus.NewRegistry()}
	log := decisionlog.New(io.Discard, 0, nil)
	stack := checkstack.New(checkstack.Options{Registerer: rec, DecisionLog: log})
	defer func() { _ = stack.Close() }()
	if _, err := grpcserver.New(grpcserver.Options{Checker: stack.Checker, Registerer: rec}); err != nil {
		return nil, err
	}
	connlimit.NewMetrics(rec, connlimit.HTTP)
	if err := buildinfo.Register(rec); err != nil {
		return nil, err
	}
	return describe(rec.Registry, rec.collectors)
}

// controllerMetrics are the controller's own metrics (beside
// controller-runtime's): the table sync's, which register as the package
// loads, and the build information, which the controller registers
// (app.RunController).
func controllerMetrics() ([]metric, error) {
	if err := buildinfo.Register(crmetrics.Registry); err != nil {
		return nil, err
	}
	return describe(crmetrics.Registry, nil)
}

// describe lists the sluice_ metrics of reg: those Gather finds, and the
// vectors among collectors that have no child yet.
func describe(reg prometheus.Gatherer, collectors []prometheus.Collector) ([]metric, error) {
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	byName := map[string]metric{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "sluice_") {
			byName[f.GetName()] = familyMetric(f)
		}
	}
	for _, c := range collectors {
		typ := vectorType(c)
		if typ == "" {
			continue
		}
		for _, m := range descs(c) {
			if _, ok := byName[m.name]; !ok && strings.HasPrefix(m.name, "sluice_") {
				m.typ = typ
				byName[m.name] = m
			}
		}
	}
	out := make([]metric, 0, len(byName))
	for _, m := range byName {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b metric) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func familyMetric(f *dto.MetricFamily) metric {
	m := metric{name: f.GetName(), help: f.GetHelp(), typ: strings.ToLower(f.GetType().String())}
	for _, s := range f.GetMetric() {
		if h := s.GetHistogram(); h != nil && !strings.Contains(m.help, "Buckets") {
			m.help += " Buckets: " + bucketBounds(h) + "."
		}
		for _, l := range s.GetLabel() {
			if !slices.Contains(m.labels, l.GetName()) {
				m.labels = append(m.labels, l.GetName())
			}
		}
	}
	return m
}

// bucketBounds lists a histogram's bucket upper bounds.
func bucketBounds(h *dto.Histogram) string {
	bs := make([]string, len(h.GetBucket()))
	for i, b := range h.GetBucket() {
		bs[i] = strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
	}
	return strings.Join(bs, ", ")
}

// vectorType is the type of a vector collector; "" for another.
func vectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// descs reads the name, help and variable labels of c's descriptions
// from their String form, the only one client_golang exports:
// Desc{fqName: "...", help: "...", constLabels: {...}, variableLabels: {a,b}}.
func descs(c prometheus.Collector) []metric {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	var out []metric
	for d := range ch {
		s := d.String()
		name, rest := quotedAfter(s, "fqName: ")
		help, rest := quotedAfter(rest, "help: ")
		m := metric{name: name, help: help}
		if _, vl, ok := strings.Cut(rest, "variableLabels: {"); ok {
			vl, _, _ = strings.Cut(vl, "}")
			for _, l := range strings.Split(vl, ",") {
				if l = strings.TrimSpace(l); l != "" {
					m.labels = append(m.labels, l)
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// quotedAfter unquotes the Go string literal after prefix in s, and
// returns what follows it.
func quotedAfter(s, prefix string) (string, string) {
	_, after, ok := strings.Cut(s, prefix)
	if !ok {
		return "", s
	}
	lit, err := strconv.QuotedPrefix(after)
	if err != nil {
		return "", after
	}
	v, _ := strconv.Unquote(lit)
	return v, after[len(lit):]
}

// metricsPages is docs/reference/metrics.md.
func metricsPages(string) ([]page, error) {
	check, err := checkMetrics()
	if err != nil {
		return nil, fmt.Errorf("check process: %w", err)
	}
	ctrl, err := controllerMetrics()
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	d := newDoc("the collectors the check process and the controller register")
	d.p("# Metrics")
	d.p("Every metric Sluice serves on `/metrics`, with its type, labels and help as the process reports them. Besides these, every process serves the Go runtime's `go_*` and `process_*` metrics, and the controller controller-runtime's own (`controller_runtime_*`, `workqueue_*`, `rest_client_*`).")
	d.p("## Check processes")
	d.p("`manager check`, `manager local` and `manager all` serve these on the check endpoint's address (`--listen`), at `/metrics`. The gRPC and connection metrics of the gRPC endpoint appear once it is on (`--grpc-listen`). A counter with labels has no series until its first count, except where the help says the values are exported from the start.")
	metricList(d, check)
	d.p("## Controller")
	d.p("`manager controller` and `manager all` serve these beside controller-runtime's metrics, on `--metrics-bind-address` (`:8081`), at `/metrics`.")
	metricList(d, ctrl)
	return []page{{"docs/reference/metrics.md", d.Bytes()}}, nil
}

// metricList writes a heading per metric (its anchor is its name, for
// the guides' links), its type and labels, and its help.
func metricList(d *doc, ms []metric) {
	for _, m := range ms {
		d.p("### `%s`", m.name)
		labels := "no labels"
		if len(m.labels) > 0 {
			labels = "labels " + joinCodes(m.labels)
		}
		d.p("*%s*, %s", m.typ, labels)
		d.p("%s", text(m.help))
	}
}
