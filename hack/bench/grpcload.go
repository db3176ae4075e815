package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends bytes already marshaled and keeps the answer's bytes
// unparsed: the lean generator spends nothing per call on protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// runGRPCLoad is `bench grpc-load`: the closed-loop load of a ghz run
// (same data file, workers and connections) from a lean grpc-go client,
// to tell how much of a ghz figure is ghz's own cost on a machine whose
// CPUs the generator shares with the servers.
func runGRPCLoad(args []string) error {
	fs := flag.NewFlagSet("grpc-load", flag.ContinueOnError)
	addr := fs.String("addr", "", "the rate limit service's address")
	data := fs.String("data", "", "a ghz data file: a JSON array of RateLimitRequest")
	workers := fs.Int("c", rlsConcurrency, "calls in flight")
	conns := fs.Int("connections", rlsConns, "HTTP/2 connections")
	group := fs.Int("group", 1, "requests a worker sends in sequence, the data file's in order (2: an admission and its release)")
	d := fs.Duration("duration", 5*time.Second, "how long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	res, err := grpcLoad(*addr, *data, *workers, *conns, *group, *d)
	if err != nil {
		return err
	}
	fmt.Printf("%.0f req/s, p50 %s, p99 %s, %d calls, %d failed, generator CPU %.1f µs/call\n",
		res.rps, round(res.p50), round(res.p99), res.requests, res.non2xx,
		float64(res.clientCPU.Microseconds())/float64(res.requests))
	return nil
}

// grpcLoad runs workers closed loops over the data file's requests for d.
// Each worker sends group consecutive requests one after the other (an
// admission, then its release) and stops only between groups; the
// figures count calls.
func grpcLoad(addr, dataFile string, workers, nconns, group int, d time.Duration) (wrkResult, error) {
	text, err := os.ReadFile(dataFile)
	if err != nil {
		return wrkResult{}, err
	}
	msgs, err := marshalRequests(text)
	if err != nil {
		return wrkResult{}, err
	}
	if group < 1 || len(msgs)%group != 0 {
		return wrkResult{}, fmt.Errorf("%d requests do not make groups of %d", len(msgs), group)
	}
	conns := make([]*grpc.ClientConn, nconns)
	for i := range conns {
		// Each ClientConn is one HTTP/2 connection to a single address.
		if conns[i], err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}))); err != nil {
			return wrkResult{}, err
		}
		defer conns[i].Close()
	}
	const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	cpu0, _ := processCPU(os.Getpid())
	// The run ends by a flag each worker reads before its next call, not
	// by a context: a call in flight at the end is answered, not cut.
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	lat := make([][]time.Duration, workers)
	failed := make([]int64, workers)
	start := time.Now()
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			conn := conns[w%len(conns)]
			var reply []byte
			for i := w * group; !stop.Load(); i += workers * group {
				for j := range group {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					t0 := time.Now()
					err := conn.Invoke(ctx, method, &msgs[(i+j)%len(msgs)], &reply)
					lat[w] = append(lat[w], time.Since(t0))
					cancel()
					if err != nil {
						failed[w]++
						firstErr.CompareAndSwap(nil, &err)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := processCPU(os.Getpid())
	all := slices.Concat(lat...)
	if len(all) == 0 {
		return wrkResult{}, errors.New("no calls answered")
	}
	slices.Sort(all)
	r := wrkResult{requests: int64(len(all)), rps: float64(len(all)) / elapsed.Seconds(),
		p50: all[len(all)/2], p99: all[len(all)*99/100], clientCPU: cpu1 - cpu0}
	for _, f := range failed {
		r.non2xx += f
	}
	if e := firstErr.Load(); e != nil && r.non2xx*100 > r.requests {
		return r, fmt.Errorf("%d of %d calls failed, the first: %w", r.non2xx, r.requests, *e)
	}
	return r, nil
}

// marshalRequests turns a ghz data file into the requests' wire bytes.
func marshalRequests(text []byte) ([][]byte, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(text, &raw); err != nil {
		return nil, err
	}
	msgs := make([][]byte, len(raw))
	for i, r := range raw {
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(r, &req); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		b, err := proto.Marshal(&req)
		if err != nil {
			return nil, err
		}
		msgs[i] = b
	}
	if len(msgs) == 0 {
		return nil, errors.New("no requests in the data file")
	}
	return msgs, nil
}
