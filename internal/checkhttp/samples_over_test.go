package checkhttp_test

import (
	"github.com/sluice-dev/sluice/internal/check"
	"github.com/sluice-dev/sluice/internal/checkhttp"
)

// overLimit is the X-Sluice-Over-Limit value of the transcript.
func overLimit(out *check.Outcome) string { return checkhttp.OverLimit(out) }
