package replay_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shaper-io/shaper/internal/replay"
)

// A malformed line is refused with its line number and what is wrong,
// as the enqueue CLI and HTTP API refuse a malformed task: two objects on
// a line, data after the object, a field set twice, an unknown field, a
// value of the wrong type. The bad line is the third: the first is good
// and the second is a comment, which counts as a line.
func TestReaderRefusesMalformedLines(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ line, want string }{
		{`{"ts":1767366000}{"ts":1767366001}`, "line 3: unexpected data after the JSON object at column 18 (one arrival a line)"},
		{`{"ts":1767366000} {"ts":1767366001}`, "line 3: unexpected data after the JSON object at column 19"},
		{`{"ts":1767366000} x`, "line 3: unexpected data after the JSON object at column 19"},
		{`{"ts":1767366000},`, "line 3: unexpected data after the JSON object at column 18"},
		{`{"ts":1767366000} // yesterday`, "line 3: unexpected data after the JSON object"},
		{`{"ts":1767366000,"ts":1767366001}`, "line 3: ts: set twice"},
		{`{"ts":1767366000, "key":"a", "ts":"2026-01-02T15:00:00Z"}`, "line 3: ts: set twice"},
		{`{"ts":1767366000,"key":"a","key":"b"}`, "line 3: key: set twice"},
		{`{"ts":1767366000,"t\u0073":1767366001}`, "line 3: ts: set twice"},
		{`{"ts":1767366000,"tenant":"a"}`, `line 3: unknown field "tenant" (want ts, downstream, key, cost)`},
		{`{"ts":1767366000`, "line 3: malformed JSON: the object is cut short"},
		{`{"ts":1767366000,}`, "line 3: malformed JSON at column 18"},
		{`{ts:1767366000}`, "line 3: malformed JSON at column 2"},
		{`[{"ts":1767366000}]`, "line 3: got an array, want a JSON object"},
		{`"2026-01-02T15:00:00Z"`, "line 3: got the string"},
		{`null`, "line 3: got null, want a JSON object"},
		{`{}`, "line 3: ts: required"},
		{`{"ts":"noon"}`, `line 3: ts: invalid time "noon"`},
		{`{"ts":true}`, "line 3: ts: got true, want RFC 3339 or Unix seconds"},
		{`{"ts":null}`, "line 3: ts: got null"},
		{`{"ts":{"s":1}}`, "line 3: ts: got an object"},
		{`{"ts":-5}`, "line 3: ts: invalid time"},
		{`{"ts":1767366000,"key":7}`, "line 3: key: got the number 7, want a string"},
		{`{"ts":1767366000,"key":null}`, "line 3: key: got null, want a string"},
		{`{"ts":1767366000,"downstream":["a"]}`, "line 3: downstream: got an array, want a string"},
		{`{"ts":1767366000,"downstream":""}`, "line 3: downstream: required"},
		{`{"ts":1767366000,"cost":1.5}`, "line 3: cost: got the number 1.5, want an integer"},
		{`{"ts":1767366000,"cost":"2"}`, `line 3: cost: got the string "2", want an integer`},
		{`{"ts":1767366000,"cost":1e3}`, "line 3: cost: got the number 1e3, want an integer"},
		{`{"ts":1767366000,"cost":0}`, "line 3: cost: must be at least 1, got 0"},
		{`{"ts":1767366000,"cost":99999999999999999999}`, "line 3: cost: got the number 99999999999999999999, want an integer"},
		{"{\"ts\":1767366000,\"key\":\"\xff\"}", "line 3: not valid UTF-8"},
	} {
		log := `{"ts":1767366000,"key":"ok"}` + "\n# a comment\n" + c.line + "\n"
		_, err := replay.Parse(strings.NewReader(log), "api")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", c.line, err, c.want)
		}
	}
}

// Good lines: ts as RFC 3339, Unix seconds as a number or a string; the
// defaults; white space anywhere JSON allows it; a value with braces,
// commas and escapes inside a string.
func TestReaderReadsGoodLines(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	log := `{"ts":"2026-01-02T15:00:00Z"}
  {"ts": 1767366000 , "downstream": "b", "key": "t-1", "cost": 3}

{ "cost":2,"key":"a,}\"{","ts":"1767366000" }
	{"ts":"2026-01-02T16:00:00+01:00","key":"\u00e9"}
`
	rd := replay.NewReader(strings.NewReader(log), "api")
	want := []replay.Arrival{
		{Line: 1, TS: t0, Downstream: "api", Cost: 1},
		{Line: 2, TS: t0, Downstream: "b", Key: "t-1", Cost: 3},
		{Line: 4, TS: t0, Downstream: "api", Key: `a,}"{`, Cost: 2},
		{Line: 5, TS: t0, Downstream: "api", Key: "é", Cost: 1},
	}
	for i, w := range want {
		a, err := rd.Next()
		if err != nil || a.Line != w.Line || !a.TS.Equal(w.TS) || a.Downstream != w.Downstream || a.Key != w.Key || a.Cost != w.Cost {
			t.Errorf("arrival %d: got %+v, %v; want %+v", i, a, err, w)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Errorf("after the last line: %v, want io.EOF", err)
	}
	if rd.Lines() != 5 || rd.Bytes() != int64(len(log)) {
		t.Errorf("read %d lines, %d bytes; want 5, %d", rd.Lines(), rd.Bytes(), len(log))
	}
}

// A line longer than MaxLine is an error naming it, not a silent stop.
func TestReaderRefusesALongLine(t *testing.T) {
	t.Parallel()
	log := `{"ts":1767366000}` + "\n" + `{"ts":1767366000,"key":"` + strings.Repeat("k", replay.MaxLine) + `"}` + "\n"
	_, err := replay.Parse(strings.NewReader(log), "api")
	if err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Errorf("got %v, want line 2 refused as too long", err)
	}
}

// Whatever the Reader accepts, encoding/json reads as one object of
// known fields with the same key and cost; it never panics.
func FuzzReaderLine(f *testing.F) {
	for _, s := range []string{`{"ts":1767366000,"key":"a","cost":2}`, `{"ts":"2026-01-02T15:00:00Z","key":"a,}\"{"}`,
		`{"ts":1767366000}{"ts":1}`, `{"ts":1,"ts":2}`, `{"ts":1767366000,"key":{"a":[1,"}"]}}`, ` {"key" : "\u0074", "ts":1e9 } `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "\n") {
			return
		}
		as, err := replay.Parse(strings.NewReader(line+"\n"), "api")
		if err != nil || len(as) != 1 {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &m); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", line, err)
		}
		var key string
		var cost int64 = 1
		for k, v := range m {
			switch k {
			case "key":
				json.Unmarshal(v, &key)
			case "cost":
				json.Unmarshal(v, &cost)
			case "ts", "downstream":
			default:
				t.Fatalf("accepted %q with field %q", line, k)
			}
		}
		if as[0].Key != key || as[0].Cost != cost {
			t.Fatalf("%q: key %q cost %d, encoding/json reads key %q cost %d", line, as[0].Key, as[0].Cost, key, cost)
		}
	})
}
