package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/internal/intake"
)

// LocalCaller is who calls in local mode, where nothing is authenticated.
const LocalCaller = "local"

// CheckLocalListen refuses an admin address that is not on loopback (the
// admin API has no authentication in local mode) or that is one of the
// check endpoints' addresses taken, named in taken.
func CheckLocalListen(addr string, taken ...string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--admin-listen %q: %w", addr, err)
	}
	if !isLoopback(host) {
		return fmt.Errorf("--admin-listen %q: must be a loopback address such as 127.0.0.1:8081 or [::1]:8081, as nothing on it is authenticated", addr)
	}
	for _, t := range taken {
		if _, p, err := net.SplitHostPort(t); err == nil && p == port && port != "0" {
			return fmt.Errorf("--admin-listen %q: port %s is the check endpoint's (%s); the admin API needs a port of its own", addr, port, t)
		}
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServeLocal serves h on ln until ctx ends, every call made by
// LocalCaller, to the names no DNS rebinding can give another site
// (intake.Unrebindable; 421 for any other Host).
func ServeLocal(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if name := intake.NormalizeHost(r.Host); !intake.Unrebindable(name) {
				WriteStatus(w, http.StatusMisdirectedRequest, metav1.StatusReason("MisdirectedRequest"),
					fmt.Sprintf("Host %q: the admin API answers to localhost and IP addresses only, so that another site's name rebound to this address reaches nothing", intake.Excerpt(name)))
				return
			}
			h.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), LocalCaller)))
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown) // then Serve returns
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}
