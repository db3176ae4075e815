package model_test

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/ratelimit"
	"github.com/sluice-dev/sluice/internal/ratelimit/ratelimittest"
)

func TestDocumentedExamples(t *testing.T) {
	ratelimittest.RunExamples(t, func(_ *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return ratelimittest.NewReference(clock)
	})
}

func TestHolderExamples(t *testing.T) {
	ratelimittest.RunHolders(t, func(_ *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return ratelimittest.NewReference(clock)
	})
}

func TestReserveExamples(t *testing.T) {
	ratelimittest.RunReserves(t, func(_ *testing.T, clock *ratelimittest.Clock) ratelimit.Store {
		return ratelimittest.NewReference(clock)
	})
}
