package admin

import "context"

type callerKey struct{}

// WithCaller returns ctx carrying the name of who makes the call: the user
// the API server authenticated in a cluster, "local" in local mode.
func WithCaller(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, callerKey{}, name)
}

// CallerFrom returns the name WithCaller stored, or "" when none was.
func CallerFrom(ctx context.Context) string {
	name, _ := ctx.Value(callerKey{}).(string)
	return name
}
