package grpcserver

import (
	"errors"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-dev/sluice/internal/policy"
)

// rlsRequest is what the service reads of a RateLimitRequest. The server
// parses it from the wire in one pass (serverCodec), its strings cut from
// one copy of the message, instead of building the message's tree of
// objects (one per descriptor, entry and string); a caller in process
// gives the message (fromMessage).
type rlsRequest struct {
	domain      string
	descriptors []descriptorRead
	// entries are every descriptor's entries, in order.
	entries    []policy.DescriptorEntry
	hitsAddend uint32
}

// descriptorRead is one descriptor: its entries are entries[from:to] of
// its request.
type descriptorRead struct {
	from, to      int
	limit         ownLimitSpec
	hasLimit      bool
	hitsAddend    uint64
	hasHitsAddend bool
	negativeHits  bool
}

// ownLimitSpec is the limit a descriptor carries (RateLimitOverride).
type ownLimitSpec struct {
	requestsPerUnit uint32
	unit            int32
	multiplier      uint32
	hasMultiplier   bool
}

// reset empties r for the next call, keeping its memory.
func (r *rlsRequest) reset() {
	clear(r.entries)
	*r = rlsRequest{descriptors: r.descriptors[:0], entries: r.entries[:0]}
}

// fromMessage reads m into r; r's strings are m's.
func (r *rlsRequest) fromMessage(m *ratelimitv3.RateLimitRequest) {
	r.domain, r.hitsAddend = m.GetDomain(), m.GetHitsAddend()
	for _, d := range m.GetDescriptors() {
		rd := descriptorRead{from: len(r.entries), negativeHits: d.GetIsNegativeHits()}
		for _, e := range d.GetEntries() {
			r.entries = append(r.entries, policy.DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()})
		}
		rd.to = len(r.entries)
		if o := d.GetLimit(); o != nil {
			rd.hasLimit = true
			rd.limit = ownLimitSpec{requestsPerUnit: o.GetRequestsPerUnit(), unit: int32(o.GetUnit())}
			if m := o.GetUnitMultiplier(); m != nil {
				rd.limit.multiplier, rd.limit.hasMultiplier = m.GetValue(), true
			}
		}
		if h := d.GetHitsAddend(); h != nil {
			rd.hitsAddend, rd.hasHitsAddend = h.GetValue(), true
		}
		r.descriptors = append(r.descriptors, rd)
	}
}

// serverCodec is grpc's proto codec, except that a ShouldRateLimit
// request is parsed into an rlsRequest.
type serverCodec struct{ encoding.CodecV2 }

func newServerCodec() serverCodec { return serverCodec{encoding.GetCodecV2(proto.Name)} }

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rlsRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	return r.unmarshal(b, string(b))
}

// The field numbers of the messages the wire parser reads (rls.proto,
// ratelimit.proto, wrappers.proto).
const (
	fieldRequestDomain      = 1
	fieldRequestDescriptors = 2
	fieldRequestHitsAddend  = 3

	fieldDescriptorEntries    = 1
	fieldDescriptorLimit      = 2
	fieldDescriptorHitsAddend = 3
	fieldDescriptorNegative   = 4

	fieldEntryKey   = 1
	fieldEntryValue = 2

	fieldLimitRequestsPerUnit = 1
	fieldLimitUnit            = 2
	fieldLimitUnitMultiplier  = 3

	fieldWrapperValue = 1
)

var (
	errInvalidUTF8 = errors.New("string field contains invalid UTF-8")
	errFieldNumber = errors.New("invalid field number")
)

// unmarshal parses a RateLimitRequest from b into r as proto.Unmarshal
// reads it: a field with another wire type than its own is an unknown
// field and skipped, as are unknown fields; the last of a scalar field
// wins; a message field given twice is merged; strings must be UTF-8.
// s is b as a string: r's strings are cut from it.
func (r *rlsRequest) unmarshal(b []byte, s string) error {
	w := wire{b: b, s: s, end: len(b)}
	for w.pos < w.end {
		num, typ, err := w.tag()
		var m wire
		switch {
		case err != nil:
		case num == fieldRequestDomain && typ == protowire.BytesType:
			r.domain, err = w.str()
		case num == fieldRequestDescriptors && typ == protowire.BytesType:
			if m, err = w.message(); err == nil {
				err = r.unmarshalDescriptor(&m)
			}
		case num == fieldRequestHitsAddend && typ == protowire.VarintType:
			var v uint64
			v, err = w.varint()
			r.hitsAddend = uint32(v) //nolint:gosec // a uint32 field: proto keeps the low 32 bits
		default:
			err = w.skip(num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unmarshalDescriptor appends the descriptor w holds to r.
func (r *rlsRequest) unmarshalDescriptor(w *wire) error {
	d := descriptorRead{from: len(r.entries)}
	for w.pos < w.end {
		num, typ, err := w.tag()
		var m wire
		switch {
		case err != nil:
		case num == fieldDescriptorEntries && typ == protowire.BytesType:
			var e policy.DescriptorEntry
			if m, err = w.message(); err == nil {
				err = unmarshalEntry(&m, &e)
			}
			r.entries = append(r.entries, e)
		case num == fieldDescriptorLimit && typ == protowire.BytesType:
			d.hasLimit = true
			if m, err = w.message(); err == nil {
				err = unmarshalLimit(&m, &d.limit)
			}
		case num == fieldDescriptorHitsAddend && typ == protowire.BytesType:
			d.hasHitsAddend = true
			if m, err = w.message(); err == nil {
				err = unmarshalWrapper(&m, &d.hitsAddend)
			}
		case num == fieldDescriptorNegative && typ == protowire.VarintType:
			var v uint64
			v, err = w.varint()
			d.negativeHits = v != 0
		default:
			err = w.skip(num, typ)
		}
		if err != nil {
			return err
		}
	}
	d.to = len(r.entries)
	r.descriptors = append(r.descriptors, d)
	return nil
}

func unmarshalEntry(w *wire, e *policy.DescriptorEntry) error {
	for w.pos < w.end {
		num, typ, err := w.tag()
		switch {
		case err != nil:
		case num == fieldEntryKey && typ == protowire.BytesType:
			e.Key, err = w.str()
		case num == fieldEntryValue && typ == protowire.BytesType:
			e.Value, err = w.str()
		default:
			err = w.skip(num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func unmarshalLimit(w *wire, l *ownLimitSpec) error {
	for w.pos < w.end {
		num, typ, err := w.tag()
		var v uint64
		var m wire
		switch {
		case err != nil:
		case num == fieldLimitRequestsPerUnit && typ == protowire.VarintType:
			v, err = w.varint()
			l.requestsPerUnit = uint32(v) //nolint:gosec // a uint32 field: proto keeps the low 32 bits
		case num == fieldLimitUnit && typ == protowire.VarintType:
			v, err = w.varint()
			l.unit = int32(v) //nolint:gosec // an enum: proto keeps the low 32 bits
		case num == fieldLimitUnitMultiplier && typ == protowire.BytesType:
			l.hasMultiplier = true
			v = uint64(l.multiplier)
			if m, err = w.message(); err == nil {
				err = unmarshalWrapper(&m, &v)
			}
			l.multiplier = uint32(v) //nolint:gosec // a UInt32Value: proto keeps the low 32 bits
		default:
			err = w.skip(num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// unmarshalWrapper reads a UInt64Value's or UInt32Value's value, merging
// into v as proto does.
func unmarshalWrapper(w *wire, v *uint64) error {
	for w.pos < w.end {
		num, typ, err := w.tag()
		switch {
		case err != nil:
		case num == fieldWrapperValue && typ == protowire.VarintType:
			*v, err = w.varint()
		default:
			err = w.skip(num, typ)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// wire reads one message's fields: those in b[pos:end], b being the
// whole request and s the same bytes as a string, which strings are cut
// from.
type wire struct {
	b        []byte
	s        string
	pos, end int
}

// tag reads the next field's number and wire type.
func (w *wire) tag() (protowire.Number, protowire.Type, error) {
	num, typ, n := protowire.ConsumeTag(w.b[w.pos:w.end])
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	if num > protowire.MaxValidNumber {
		return 0, 0, errFieldNumber
	}
	w.pos += n
	return num, typ, nil
}

// skip consumes the value of a field not read.
func (w *wire) skip(num protowire.Number, typ protowire.Type) error {
	n := protowire.ConsumeFieldValue(num, typ, w.b[w.pos:w.end])
	if n < 0 {
		return protowire.ParseError(n)
	}
	w.pos += n
	return nil
}

func (w *wire) varint() (uint64, error) {
	v, n := protowire.ConsumeVarint(w.b[w.pos:w.end])
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	w.pos += n
	return v, nil
}

// bytes consumes a length-delimited value and returns where it is.
func (w *wire) bytes() (from, to int, err error) {
	v, n := protowire.ConsumeBytes(w.b[w.pos:w.end])
	if n < 0 {
		return 0, 0, protowire.ParseError(n)
	}
	from = w.pos + n - len(v)
	w.pos += n
	return from, from + len(v), nil
}

func (w *wire) str() (string, error) {
	from, to, err := w.bytes()
	if err != nil {
		return "", err
	}
	if s := w.s[from:to]; utf8.ValidString(s) {
		return s, nil
	}
	return "", errInvalidUTF8
}

// message consumes an embedded message and returns its reader.
func (w *wire) message() (wire, error) {
	from, to, err := w.bytes()
	return wire{b: w.b, s: w.s, pos: from, end: to}, err
}
