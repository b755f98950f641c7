package jsontext_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/jsontext"
)

func TestDescribe(t *testing.T) {
	for i, c := range []struct{ in, want string }{
		{`{"a":1}`, "an object"}, {`[1]`, "an array"}, {`"x"`, `the string "x"`}, {` 1.5 `, "the number 1.5"},
		{`true`, "true"}, {`null`, "null"}, {`  `, "nothing"},
		{`"` + strings.Repeat("é", 30) + `"`, `the string "` + strings.Repeat("é", 19) + `…`},
	} {
		if got := jsontext.Describe([]byte(c.in)); got != c.want {
			t.Errorf("step %d: Describe(%s) = %q, want %q", i, c.in, got, c.want)
		}
	}
}

func TestDecodeReason(t *testing.T) {
	for i, c := range []struct{ in, want string }{
		{`{"a": é}`, "malformed JSON at column 7: invalid character"},
		{`[1]`, "got a JSON array, want an object"},
		{`{"a":`, "malformed JSON: the object is cut short"},
	} {
		var v map[string]any
		err := json.NewDecoder(strings.NewReader(c.in)).Decode(&v) // as the readers decode
		if got := jsontext.DecodeReason(err, []byte(c.in), "an object"); !strings.HasPrefix(got, c.want) {
			t.Errorf("step %d: DecodeReason(%s) = %q, want %q…", i, c.in, got, c.want)
		}
	}
}
