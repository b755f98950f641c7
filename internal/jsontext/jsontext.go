// Package jsontext words what is wrong with a line of JSON the way every
// shaper reader says it (the task reader of the enqueue CLI and the HTTP
// API, replay's log reader): a value named by its kind, long text clipped
// at a rune, a character column, one line for a decoding error.
package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Describe names a JSON value's kind for an error message, quoting short
// scalars: `the string "x"`, `the number 1.5`, `true`, `null`, `an object`.
func Describe(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "the string " + Clip(string(v), 40)
	case 't', 'f', 'n':
		return string(v)
	}
	return "the number " + Clip(string(v), 40)
}

// Clip is s cut to at most n bytes at a rune boundary, with "…" when cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Column is the 1-based character column of the 1-based byte offset off
// in data.
func Column(data []byte, off int64) int {
	off = min(off, int64(len(data)))
	if off < 1 {
		return 1
	}
	return utf8.RuneCount(data[:off-1]) + 1
}

// DecodeReason says in one line why decoding data gave err: where its
// syntax breaks (a column), that it is another kind of value than want
// ("an object"), or that it is cut short.
func DecodeReason(err error, data []byte, want string) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at column %d: %s", Column(data, se.Offset), strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		return fmt.Sprintf("got a JSON %s, want %s", te.Value, want)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "malformed JSON: the object is cut short"
	}
	return "malformed JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}
