// Package buildinfo holds what a build stamps into the binary: the release
// version and the commit, set by the linker, with the Go version and the
// Redis library version beside them. `manager version`, the
// sluice_build_info metric and the image labels show the same values.
//
// Stamp a build with:
//
//	go build -ldflags "-X github.com/sluice-dev/sluice/internal/buildinfo.Version=$(git describe --tags --always --dirty) \
//	  -X github.com/sluice-dev/sluice/internal/buildinfo.Revision=$(git rev-parse HEAD)" ./cmd/manager
//
// (`make build` and `make image` do).
package buildinfo

import (
	"errors"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

// Version and Revision are set with -ldflags -X at build time. Left empty,
// Get falls back to what the Go toolchain recorded (the module version, the
// VCS revision), or "unknown".
var (
	// Version is the release version, `git describe --tags --always --dirty`.
	Version string
	// Revision is the full commit hash the binary was built from.
	Revision string
)

// Info is one build's identity.
type Info struct {
	// Version is the release version (e.g. v0.1.0, or v0.1.0-3-gabc1234-dirty).
	Version string
	// Revision is the commit hash.
	Revision string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
	// Library is the name of the Redis function library the binary loads.
	Library string
}

// Get returns the stamped values, filled in from the toolchain's build
// information where the linker set nothing.
func Get() Info {
	info := Info{Version: Version, Revision: Revision, GoVersion: runtime.Version(), Library: redisstore.LibraryName}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && info.Revision == "" {
				info.Revision = s.Value
			}
		}
	}
	if info.Version == "" {
		info.Version = "unknown"
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
}

// MetricName is the name of the build information gauge.
const MetricName = "sluice_build_info"

// Collector returns the sluice_build_info gauge: constant 1, with the build's
// version, revision, goversion and library as labels.
func Collector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricName,
		Help: "Constant 1, with labels for the build's release version, commit, Go version and Redis library version.",
		ConstLabels: prometheus.Labels{
			"version":   i.Version,
			"revision":  i.Revision,
			"goversion": i.GoVersion,
			"library":   i.Library,
		},
	})
	g.Set(1)
	return g
}

// Register registers the sluice_build_info gauge with reg. A registry that
// already has it (a process-wide registry shared by several managers in one
// process) is left as it is.
func Register(reg prometheus.Registerer) error {
	if err := reg.Register(Collector()); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			return nil
		}
		return err
	}
	return nil
}
