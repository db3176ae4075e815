package main

import (
	"fmt"

	"github.com/sluice-dev/sluice/internal/buildinfo"
)

func runVersion() {
	i := buildinfo.Get()
	fmt.Printf("sluice %s\ncommit %s\ngo %s\nredis library %s\n", i.Version, i.Revision, i.GoVersion, i.Library)
}
