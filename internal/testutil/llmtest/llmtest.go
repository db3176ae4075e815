// Package llmtest is an OpenAI-compatible upstream for tests: POST
// /v1/chat/completions answers JSON, or server-sent events with
// `stream: true`, reporting the token usage the test chose for each request,
// and records what it served, so a test adds up the usage of the requests a
// rate limiter let through.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// UsageHeader is the request header that chooses the usage a response
// reports: "prompt=120 completion=380 cached=40" (any of the three; those
// left out are 0).
const UsageHeader = "X-Test-Usage"

// Usage is the token usage of one response, in OpenAI's terms: input
// (prompt) tokens, output (completion) tokens, and how many of the input
// tokens came from the prompt cache.
type Usage struct {
	Prompt     int64
	Completion int64
	Cached     int64
}

// Total is prompt plus completion tokens, OpenAI's total_tokens.
func (u Usage) Total() int64 { return u.Prompt + u.Completion }

// ParseUsage reads a UsageHeader value.
func ParseUsage(s string) (Usage, error) {
	var u Usage
	for _, f := range strings.Fields(s) {
		name, val, ok := strings.Cut(f, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil || n < 0 {
			return Usage{}, fmt.Errorf("%s: %q is not name=count with a count of 0 or more", UsageHeader, f)
		}
		switch name {
		case "prompt":
			u.Prompt = n
		case "completion":
			u.Completion = n
		case "cached":
			u.Cached = n
		default:
			return Usage{}, fmt.Errorf("%s: unknown quantity %q (prompt, completion, cached)", UsageHeader, name)
		}
	}
	return u, nil
}

func (u Usage) String() string {
	return fmt.Sprintf("prompt=%d completion=%d cached=%d", u.Prompt, u.Completion, u.Cached)
}

// Served is one request the server answered.
type Served struct {
	Usage  Usage
	Stream bool
	// Header is the request's headers as they reached the server.
	Header http.Header
	// Complete: the whole response was written, its usage included (a
	// client gone mid-stream leaves it false).
	Complete bool
}

// Server is the upstream.
type Server struct {
	// Addr is host:port on loopback.
	Addr string
	URL  string

	mu     sync.Mutex
	served []Served
	gate   chan struct{}
	// arrived receives one value per request that starts its answer.
	arrived chan struct{}
}

// Start runs a Server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{arrived: make(chan struct{}, 1024)}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() { s.Release(); srv.Close() })
	s.URL = srv.URL
	s.Addr = strings.TrimPrefix(srv.URL, "http://")
	return s
}

// Hold makes the next requests stop before their last part (the usage)
// until Release: a streamed answer sends its first chunks and waits, as a
// model does while it generates; a JSON answer waits before it is written.
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

// Release lets the held requests finish, and stops holding.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// Arrived returns a channel that receives a value for each request that has
// started its answer (held or not).
func (s *Server) Arrived() <-chan struct{} { return s.arrived }

// Served returns what the server has answered so far.
func (s *Server) Served() []Served {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Served(nil), s.served...)
}

// Total is the total tokens (prompt plus completion) of the complete
// answers served: what an LLM provider would bill.
func (s *Server) Total() int64 {
	var n int64
	for _, r := range s.Served() {
		if r.Complete {
			n += r.Usage.Total()
		}
	}
	return n
}

// chatRequest is the part of OpenAI's chat completion request the server
// reads.
type chatRequest struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		apiError(w, http.StatusNotFound, "only POST /v1/chat/completions is served")
		return
	}
	var req chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "request body: "+err.Error())
		return
	}
	if req.Model == "" || len(req.Messages) == 0 {
		apiError(w, http.StatusBadRequest, "request body: model and messages are required")
		return
	}
	u, err := ParseUsage(r.Header.Get(UsageHeader))
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	i := len(s.served)
	s.served = append(s.served, Served{Usage: u, Stream: req.Stream, Header: r.Header.Clone()})
	gate := s.gate
	s.mu.Unlock()
	s.arrived <- struct{}{}
	a := answer{w: w, model: req.Model, usage: u, gate: gate, done: r.Context().Done()}
	var complete bool
	if req.Stream {
		complete = a.stream(req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		complete = a.json()
	}
	s.mu.Lock()
	s.served[i].Complete = complete
	s.mu.Unlock()
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}

// answer writes one response.
type answer struct {
	w     http.ResponseWriter
	model string
	usage Usage
	gate  chan struct{}
	done  <-chan struct{}
}

// wait waits at the gate, if any; false: the client went away.
func (a answer) wait() bool {
	if a.gate == nil {
		return true
	}
	select {
	case <-a.gate:
		return true
	case <-a.done:
		return false
	}
}

// usageJSON is OpenAI's usage object.
func (a answer) usageJSON() map[string]any {
	return map[string]any{
		"prompt_tokens":         a.usage.Prompt,
		"completion_tokens":     a.usage.Completion,
		"total_tokens":          a.usage.Total(),
		"prompt_tokens_details": map[string]any{"cached_tokens": a.usage.Cached},
	}
}

func (a answer) json() bool {
	if !a.wait() {
		return false
	}
	a.w.Header().Set("Content-Type", "application/json")
	err := json.NewEncoder(a.w).Encode(map[string]any{
		"id": "chatcmpl-test", "object": "chat.completion", "model": a.model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "Hello from the test model."}}},
		"usage": a.usageJSON(),
	})
	return err == nil
}

// stream writes the answer as OpenAI streams it: chunks of the message,
// each with "usage": null when the client asked for usage, then a last chunk
// with no choices and the usage, then [DONE].
func (a answer) stream(includeUsage bool) bool {
	f, ok := a.w.(http.Flusher)
	if !ok {
		return false
	}
	a.w.Header().Set("Content-Type", "text/event-stream")
	a.w.Header().Set("Cache-Control", "no-cache")
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(a.w, "data: %s\n\n", b); err != nil {
			return err
		}
		f.Flush()
		return nil
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "model": a.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	for _, c := range []map[string]any{
		chunk(map[string]any{"role": "assistant", "content": ""}, nil),
		chunk(map[string]any{"content": "Hello "}, nil),
	} {
		if send(c) != nil {
			return false
		}
	}
	if !a.wait() || send(chunk(map[string]any{"content": "from the test model."}, "stop")) != nil {
		return false
	}
	if includeUsage && a.sendSplit(f, map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk",
		"model": a.model, "choices": []any{}, "usage": a.usageJSON()}) != nil {
		return false
	}
	if _, err := fmt.Fprint(a.w, "data: [DONE]\n\n"); err != nil {
		return false
	}
	f.Flush()
	return true
}

// sendSplit sends v as one event in two writes, flushed apart, its usage
// object cut in the middle, as the network may deliver it: a reader of the
// stream must join them.
func (a answer) sendSplit(f http.Flusher, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	event := "data: " + string(b) + "\n\n"
	cut := strings.Index(event, "completion_tokens")
	for _, part := range []string{event[:cut], event[cut:]} {
		if _, err := io.WriteString(a.w, part); err != nil {
			return err
		}
		f.Flush()
	}
	return nil
}
