// Command middleware is a hello-world server that Sluice's net/http
// middleware limits to N requests per client address and period:
//
//	go run ./examples/middleware --limit 5 --per 1m
//	for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' localhost:8080/; done
//	200 200 200 200 200 429 429
//
// The counters live in the process, unless --redis-url points at a Redis
// that every replica shares:
//
//	go run ./examples/middleware --redis-url redis://localhost:6379/0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	ratelimitv1alpha1 "github.com/sluice-dev/sluice/api/v1alpha1"
	"github.com/sluice-dev/sluice/clientip"
	"github.com/sluice-dev/sluice/middleware"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", ":8080", "address to serve on")
	limit := flag.Int64("limit", 10, "requests each client address may make per period")
	per := flag.Duration("per", time.Minute, "the period; the allowance is refilled whole at its end")
	redisURL := flag.String("redis-url", "", "keep the counters in this Redis (redis://host:port/db) instead of in the process")
	trusted := flag.String("trusted-proxies", strings.Join(clientip.DefaultTrustedProxies, ","), "comma-separated CIDRs whose X-Forwarded-For is believed")
	flag.Parse()

	proxies, err := clientip.ParseTrustedProxies(strings.Split(*trusted, ","))
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	opts := []middleware.Option{
		middleware.WithTrustedProxies(proxies),
		middleware.WithPolicy("hello-per-client", ratelimitv1alpha1.RateLimitPolicySpec{
			Key: "{client_ip}",
			Limits: []ratelimitv1alpha1.Limit{{
				Name: "per-period",
				TokenBucket: &ratelimitv1alpha1.TokenBucket{
					Capacity:       ratelimitv1alpha1.Count(*limit),
					RefillRate:     ratelimitv1alpha1.Count(*limit),
					RefillInterval: ratelimitv1alpha1.Duration(per.String()),
				},
			}},
		}),
	}
	store := "memory"
	if *redisURL != "" {
		opts = append(opts, middleware.WithRedisURL(*redisURL))
		store = "redis"
	}
	lim, err := middleware.New(opts...)
	if err != nil {
		return err
	}
	defer lim.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	srv := &http.Server{Addr: *listen, Handler: lim.Handler(mux), ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	slog.Info("serving", "listen", *listen, "limit", *limit, "per", per.String(), "store", store)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
