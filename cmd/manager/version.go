package main

import (
	"fmt"
	"runtime/debug"

	"github.com/sluice-dev/sluice/internal/ratelimit/redisstore"
)

func runVersion() {
	version := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		version = info.Main.Version
	}
	fmt.Printf("sluice %s\nredis library %s\n", version, redisstore.LibraryName)
}
