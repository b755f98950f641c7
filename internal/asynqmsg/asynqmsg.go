// Package asynqmsg reads and rewrites asynq v0.26's TaskMessage (the
// protobuf in a task hash's "msg" field) with protowire, without asynq's
// internal packages: a rewrite changes only the fields it sets and keeps
// every other field's bytes, so asynq's Inspector reads the result as
// asynq wrote it. The take engine (shaping/take) finishes tasks with it;
// the producer (queue) rewrites a waiting task's payload when a newer one
// collapses into it.
package asynqmsg

import (
	"errors"
	"fmt"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// The field numbers of asynq v0.26's TaskMessage (internal/proto/asynq.proto).
// TestMessageLayout (asynqmsg_test.go) fails when a message asynq.Client writes stops matching
// them.
const (
	fieldType         protowire.Number = 1  // string
	fieldPayload      protowire.Number = 2  // bytes
	fieldID           protowire.Number = 3  // string
	fieldQueue        protowire.Number = 4  // string
	fieldRetry        protowire.Number = 5  // int32: max retries
	fieldRetried      protowire.Number = 6  // int32
	fieldErrorMsg     protowire.Number = 7  // string
	fieldTimeout      protowire.Number = 8  // int64 seconds
	fieldDeadline     protowire.Number = 9  // int64 Unix seconds
	fieldUniqueKey    protowire.Number = 10 // string
	fieldLastFailedAt protowire.Number = 11 // int64 Unix seconds
	fieldRetention    protowire.Number = 12 // int64 seconds
	fieldCompletedAt  protowire.Number = 13 // int64 Unix seconds
	fieldGroupKey     protowire.Number = 14 // string
	fieldHeaders      protowire.Number = 15 // map<string, string>
)

// ErrMalformed marks a message that cannot be read as a TaskMessage.
var ErrMalformed = errors.New("asynqmsg: malformed task message")

// Message is the part of an asynq TaskMessage shaper reads. raw is the
// encoded message as stored; rewrites start from it so that every field
// not changed keeps its bytes.
type Message struct {
	raw          []byte
	Type         string
	Payload      []byte
	Headers      map[string]string
	ID, Queue    string
	Retry        int
	Retried      int
	ErrorMsg     string
	Timeout      int64
	Deadline     int64
	UniqueKey    string
	LastFailedAt int64
	Retention    int64
	CompletedAt  int64
	GroupKey     string
}

// Decode reads b as a TaskMessage. Unknown fields are skipped (and
// kept by rewrites); a known field of the wrong wire type is an error.
func Decode(b []byte) (*Message, error) {
	m := &Message{raw: b}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		if err := m.set(num, typ, b[:n]); err != nil {
			return nil, err
		}
		b = b[n:]
	}
	return m, nil
}

// set stores one field's value v (already delimited by ConsumeFieldValue).
func (m *Message) set(num protowire.Number, typ protowire.Type, v []byte) error {
	want := protowire.BytesType
	switch num {
	case fieldRetry, fieldRetried, fieldTimeout, fieldDeadline, fieldLastFailedAt, fieldRetention, fieldCompletedAt:
		want = protowire.VarintType
	case fieldType, fieldPayload, fieldID, fieldQueue, fieldErrorMsg, fieldUniqueKey, fieldGroupKey, fieldHeaders:
	default:
		return nil // a field this version does not know: kept as is
	}
	if typ != want {
		return fmt.Errorf("%w: field %d has wire type %d", ErrMalformed, num, typ)
	}
	if want == protowire.VarintType {
		x, _ := protowire.ConsumeVarint(v)
		m.setInt(num, int64(x))
		return nil
	}
	s, _ := protowire.ConsumeBytes(v)
	if num == fieldHeaders {
		return m.addHeader(s)
	}
	m.setString(num, s)
	return nil
}

func (m *Message) setInt(num protowire.Number, x int64) {
	switch num {
	case fieldRetry:
		m.Retry = int(int32(x))
	case fieldRetried:
		m.Retried = int(int32(x))
	case fieldTimeout:
		m.Timeout = x
	case fieldDeadline:
		m.Deadline = x
	case fieldLastFailedAt:
		m.LastFailedAt = x
	case fieldRetention:
		m.Retention = x
	case fieldCompletedAt:
		m.CompletedAt = x
	}
}

func (m *Message) setString(num protowire.Number, s []byte) {
	switch num {
	case fieldType:
		m.Type = string(s)
	case fieldPayload:
		m.Payload = append([]byte(nil), s...)
	case fieldID:
		m.ID = string(s)
	case fieldQueue:
		m.Queue = string(s)
	case fieldErrorMsg:
		m.ErrorMsg = string(s)
	case fieldUniqueKey:
		m.UniqueKey = string(s)
	case fieldGroupKey:
		m.GroupKey = string(s)
	}
}

// addHeader reads one map entry (key = 1, value = 2, both strings).
func (m *Message) addHeader(b []byte) error {
	var k, v string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return fmt.Errorf("%w: a header entry", ErrMalformed)
		}
		s, n2 := protowire.ConsumeBytes(b[n:])
		if n2 < 0 {
			return fmt.Errorf("%w: a header entry", ErrMalformed)
		}
		switch num {
		case 1:
			k = string(s)
		case 2:
			v = string(s)
		}
		b = b[n+n2:]
	}
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	m.Headers[k] = v
	return nil
}

// field is one field a rewrite sets: a varint, or bytes when isBytes.
type field struct {
	num     protowire.Number
	varint  uint64
	bytes   []byte
	isBytes bool
}

func intField(num protowire.Number, x int64) field { return field{num: num, varint: uint64(x)} }

func stringField(num protowire.Number, s string) field {
	return field{num: num, bytes: []byte(s), isBytes: true}
}

// zero reports whether f holds proto3's default, which an encoder omits.
func (f field) zero() bool { return (f.isBytes && len(f.bytes) == 0) || (!f.isBytes && f.varint == 0) }

func (f field) append(b []byte) []byte {
	if f.zero() {
		return b
	}
	if f.isBytes {
		b = protowire.AppendTag(b, f.num, protowire.BytesType)
		return protowire.AppendBytes(b, f.bytes)
	}
	b = protowire.AppendTag(b, f.num, protowire.VarintType)
	return protowire.AppendVarint(b, f.varint)
}

// rewrite returns raw with the fields set replaced: every other field keeps
// its bytes and its place; a field set goes where it was, or before the
// first field with a higher number (the order Go's encoder writes), and is
// left out when it holds the default. set must be in field-number order.
func rewrite(raw []byte, set ...field) []byte {
	out := make([]byte, 0, len(raw)+32)
	done := make([]bool, len(set))
	b := raw
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		n2 := protowire.ConsumeFieldValue(num, typ, b[max(n, 0):])
		if n < 0 || n2 < 0 {
			break // decodeMessage accepted raw, so this does not happen
		}
		replaced := false
		for i, f := range set {
			if !done[i] && f.num < num {
				out, done[i] = f.append(out), true
			}
			if f.num == num {
				if !done[i] {
					out, done[i] = f.append(out), true
				}
				replaced = true
			}
		}
		if !replaced {
			out = append(out, b[:n+n2]...)
		}
		b = b[n+n2:]
	}
	for i, f := range set {
		if !done[i] {
			out = f.append(out)
		}
	}
	return out
}

// Failed is m's message after a failure at now (Unix seconds): error_msg
// and last_failed_at set and, when counted, retried+1 (asynq's Retry and
// Archive).
func (m *Message) Failed(errMsg string, now int64, countRetry bool) []byte {
	retried := m.Retried
	if countRetry {
		retried++
	}
	return rewrite(m.raw, intField(fieldRetried, int64(int32(retried))), stringField(fieldErrorMsg, errMsg),
		intField(fieldLastFailedAt, now))
}

// Completed is m's message with completed_at set (asynq's MarkAsComplete).
func (m *Message) Completed(now int64) []byte {
	return rewrite(m.raw, intField(fieldCompletedAt, now))
}

// Quarantined is a new TaskMessage for a task whose stored message could
// not be read: asynq's Inspector can show it archived with the reason, and
// the unreadable bytes are kept as its payload.
func Quarantined(id, queue string, raw []byte, reason string, now int64) []byte {
	var b []byte
	for _, f := range []field{stringField(fieldType, "shaper:malformed"), {num: fieldPayload, bytes: raw, isBytes: true},
		stringField(fieldID, id), stringField(fieldQueue, queue), stringField(fieldErrorMsg, reason),
		intField(fieldLastFailedAt, now)} {
		b = f.append(b)
	}
	return b
}

// WithPayload is m's message with its payload and headers replaced (a
// newer task collapsed into this one): every other field keeps its bytes.
func (m *Message) WithPayload(payload []byte, headers map[string]string) []byte {
	b := rewrite(m.raw, field{num: fieldPayload, bytes: payload, isBytes: true})
	out := make([]byte, 0, len(b)+64)
	for len(b) > 0 { // drop every header entry, then append the new ones
		num, typ, n := protowire.ConsumeTag(b)
		n2 := protowire.ConsumeFieldValue(num, typ, b[max(n, 0):])
		if n < 0 || n2 < 0 {
			break // Decode accepted raw, so this does not happen
		}
		if num != fieldHeaders {
			out = append(out, b[:n+n2]...)
		}
		b = b[n+n2:]
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic bytes, as Go's encoder with Deterministic
	for _, k := range keys {
		var e []byte
		e = stringField(1, k).append(e)
		e = stringField(2, headers[k]).append(e)
		out = protowire.AppendTag(out, fieldHeaders, protowire.BytesType)
		out = protowire.AppendBytes(out, e)
	}
	return out
}
