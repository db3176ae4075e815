package grpcserver

import (
	"reflect"
	"testing"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The wire parser reads what proto.Unmarshal reads: the same request, or
// an error for both.
func FuzzRLSRequestWire(f *testing.F) {
	full, err := proto.Marshal(&ratelimitv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		rlsDescriptor("remote_address", "10.0.0.1", "path", "/a"),
		{
			Entries:        []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: "ü"}},
			Limit:          &ratelimitcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: 2, UnitMultiplier: wrapperspb.UInt32(3)},
			HitsAddend:     wrapperspb.UInt64(0),
			IsNegativeHits: true,
		},
		{},
	}})
	if err != nil {
		f.Fatal(err)
	}
	var b []byte
	// The domain again (the last wins), an unknown field, a descriptor
	// field with another wire type (skipped as unknown), and a descriptor
	// whose limit and hits_addend come twice (merged).
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, "other")
	b = protowire.AppendTag(b, 9, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	var d []byte
	d = protowire.AppendTag(d, 2, protowire.BytesType)
	d = protowire.AppendBytes(d, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 10))
	d = protowire.AppendTag(d, 2, protowire.BytesType)
	d = protowire.AppendBytes(d, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1))
	d = protowire.AppendTag(d, 3, protowire.BytesType)
	d = protowire.AppendBytes(d, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 4))
	d = protowire.AppendTag(d, 3, protowire.BytesType)
	d = protowire.AppendBytes(d, nil)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, d)

	for _, seed := range [][]byte{
		full,
		append(full, b...),
		full[:len(full)-3],       // cut short
		{0x0a, 0x02, 0xc3, 0x28}, // a domain that is no UTF-8
		{0x00},                   // field number 0
		nil,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m ratelimitv3.RateLimitRequest
		protoErr := proto.Unmarshal(b, &m)
		var got rlsRequest
		err := got.unmarshal(b, string(b))
		if (err != nil) != (protoErr != nil) {
			t.Fatalf("wire parser: %v, proto: %v", err, protoErr)
		}
		if err != nil {
			return
		}
		var want rlsRequest
		want.fromMessage(&m)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("wire parser read\n%+v\nproto\n%+v", got, want)
		}
	})
}
