// Package observability tests what config/prometheus ships (the chart
// ships the same files): promtool checks the alert rules and runs their
// unit tests, and every metric the rules and the Grafana dashboard query
// exists on a running manager's /metrics.
package observability

import (
	"testing"

	"github.com/sluice-dev/sluice/internal/testutil/systest"
)

var manager systest.Manager

func TestMain(m *testing.M) { manager.RunTests(m, "observability") }
