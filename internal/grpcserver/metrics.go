package grpcserver

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// metrics count gRPC answers by service and code. Decisions themselves
// are the Checker's metrics (sluice_decisions_total and the rest), shared
// with the HTTP endpoint; this counter tells the protocols apart.
type metrics struct {
	requests   *prometheus.CounterVec
	rls, authz *answers
	// clampedHits counts hits_addend above the largest count.
	clampedHits prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_grpc_requests_total",
		Help: "gRPC checks answered, by service and the code of the answer's status, as grpc-go names it (ext_authz: OK allowed, ResourceExhausted rate limited, PermissionDenied denied otherwise, InvalidArgument unreadable, Internal failed; rate limit service: OK answered, OK or OVER_LIMIT, InvalidArgument unreadable, Internal failed).",
	}, []string{"service", "code"})
	clamped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_rls_hits_addend_clamped_total",
		Help: "Rate limit service hits_addend (a descriptor's or the request's) above the largest count a limit accepts (one billion), read as that count: an estimate or a settled cost no usage reaches.",
	})
	if reg != nil {
		reg.MustRegister(requests, clamped)
	}
	return &metrics{requests: requests, clampedHits: clamped,
		rls: &answers{requests: requests, service: rlsService}, authz: &answers{requests: requests, service: authzService}}
}

// answers count one service's answers. Each code's counter is looked up
// by its labels once, at its first answer: a lookup per answer costs more
// than the count.
type answers struct {
	requests *prometheus.CounterVec
	service  string
	byCode   [codes.Unauthenticated + 1]atomic.Pointer[prometheus.Counter]
}

func (a *answers) answered(code codes.Code) {
	if int(code) >= len(a.byCode) {
		a.requests.WithLabelValues(a.service, code.String()).Inc()
		return
	}
	c := a.byCode[code].Load()
	if c == nil {
		counter := a.requests.WithLabelValues(a.service, code.String())
		c = &counter
		a.byCode[code].Store(c)
	}
	(*c).Inc()
}
