package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/internal/localmode"
)

func runLocal(args []string) error {
	cfg, pprofAddr, err := parseLocalFlags(args)
	if err != nil {
		return err
	}
	servePprof(pprofAddr)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return localmode.Run(ctx, cfg)
}

// parseLocalFlags reads local mode's flags into its Config, and the
// pprof address.
func parseLocalFlags(args []string) (localmode.Config, string, error) {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	var cfg localmode.Config
	cfg.BindFlags(fs)
	pprofAddr := fs.String("pprof-listen", "", "serve net/http/pprof on this address (profiling; keep it on loopback)")
	if err := fs.Parse(args); err != nil {
		return cfg, "", err
	}
	if err := cfg.FinishFlags(); err != nil {
		return cfg, "", err
	}
	return cfg, *pprofAddr, nil
}
