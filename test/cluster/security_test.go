package cluster

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// securityContext reads back from the running containers' processes, not
// from the YAML, what the manifests ask: a non-root user, no capabilities,
// no privilege escalation, the runtime's seccomp filter, a read-only root
// filesystem; and each pod listens on the documented ports only, where
// /metrics answers with the release's version.
func securityContext(t *testing.T, c *cluster) {
	ports := map[string][]int{"check": {8080, 9090}, "controller": {8081, 8082, 8443}}
	metricsPort := map[string]int{"check": 8080, "controller": 8081}
	for _, component := range []string{"check", "controller"} {
		for _, pod := range c.pods(t, component) {
			pid := c.containerPID(t, pod)
			status := procStatus(t, pid)
			for field, want := range map[string]string{
				"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532",
				"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
				"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
				"NoNewPrivs": "1", "Seccomp": "2",
			} {
				if got := status[field]; got != want {
					t.Errorf("%s (pid %d): %s %q, want %q", pod, pid, field, got, want)
				}
			}
			if opts := rootMountOptions(t, pid); !slices.Contains(strings.Split(opts, ","), "ro") {
				t.Errorf("%s (pid %d): root filesystem mounted %q, want read-only", pod, pid, opts)
			}
			if got := listeningPorts(t, pid); !slices.Equal(got, ports[component]) {
				t.Errorf("%s (pid %d) listens on %v, want the documented %v", pod, pid, got, ports[component])
			}
			ip := c.jsonpath(t, "{.status.podIP}", "-n", "sluice-system", "get", "pod", pod)
			body := httpGet(t, fmt.Sprintf("http://%s:%d/metrics", ip, metricsPort[component]))
			if want := fmt.Sprintf("version=%q", version1); !strings.Contains(grepLines(body, "sluice_build_info{"), want) {
				t.Errorf("%s /metrics: sluice_build_info lacks %s:\n%s", pod, want, grepLines(body, "sluice_build_info"))
			}
			t.Logf("%s: pid %d, uid %s, CapEff %s, NoNewPrivs %s, Seccomp %s, root %s, listening %v",
				pod, pid, status["Uid"], status["CapEff"], status["NoNewPrivs"], status["Seccomp"], rootMountOptions(t, pid), listeningPorts(t, pid))
		}
	}
}

// procStatus is /proc/<pid>/status, fields with their values (tabs made
// spaces).
func procStatus(t testing.TB, pid int) map[string]string {
	t.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/status", pid)), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return fields
}

// rootMountOptions are the options of the mount at "/" as the process sees
// it (/proc/<pid>/mountinfo: the fifth field is the mount point, the
// sixth its options).
func rootMountOptions(t testing.TB, pid int) string {
	t.Helper()
	for _, line := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/mountinfo", pid)), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" {
			return f[5]
		}
	}
	t.Fatalf("pid %d: no root mount", pid)
	return ""
}

// listeningPorts are the TCP ports listening in the process's network
// namespace (/proc/<pid>/net/tcp and tcp6, state 0A), sorted.
func listeningPorts(t testing.TB, pid int) []int {
	t.Helper()
	var ports []int
	for _, file := range []string{"tcp", "tcp6"} {
		for _, line := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/net/%s", pid, file)), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			p, err := strconv.ParseInt(hexPort, 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(ports, int(p)) {
				ports = append(ports, int(p))
			}
		}
	}
	slices.Sort(ports)
	return ports
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}
