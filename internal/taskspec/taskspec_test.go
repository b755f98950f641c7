package taskspec

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseGood(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	in := `{"downstream":"api","payload":{"a": [1, 2]},"key":"t1","cost":3,"unique":"u-1",
		"in":"90s","type":"charge","max_retry":0,"timeout":"2.5s"}`
	s, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.Task(now)
	if err != nil {
		t.Fatal(err)
	}
	if task.Downstream != "api" || string(task.Payload) != `{"a": [1, 2]}` || task.Key != "t1" || task.Cost != 3 ||
		task.UniqueKey != "u-1" || !task.ProcessAt.Equal(now.Add(90*time.Second)) || task.Type != "charge" ||
		task.MaxRetry == nil || *task.MaxRetry != 0 || task.Timeout != 2500*time.Millisecond {
		t.Errorf("task = %+v", task)
	}

	cases := []struct {
		in      string
		payload string
		at      time.Time
	}{
		{`{"downstream":"api"}`, "", time.Time{}},
		{`{"downstream":"api","payload":"text"}`, `"text"`, time.Time{}},
		{`{"downstream":"api","payload":null,"key":null}`, "", time.Time{}},
		{`{"downstream":"api","payload_base64":"AAEC/w=="}`, "\x00\x01\x02\xff", time.Time{}},
		{`{"downstream":"api","at":"2026-01-02T16:00:00.5+01:00"}`, "", time.Date(2026, 1, 2, 15, 0, 0, 5e8, time.UTC)},
		{`{"downstream":"api","at":1767366000}`, "", time.Unix(1767366000, 0)},
		{`{"downstream":"api","at":"1767366000.25"}`, "", time.Unix(1767366000, 25e7)},
		{`{"downstream":"api","in":2.5}`, "", now.Add(2500 * time.Millisecond)},
		{`{"downstream":"api","in":"0s"}`, "", time.Time{}},
		{"  {\"downstream\":\"api\"}\r\n", "", time.Time{}},
		{"\ufeff{\"downstream\":\"api\",\"payload\":1}\n", "1", time.Time{}}, // a UTF-8 byte order mark
	}
	for i, c := range cases {
		s, err := Parse([]byte(c.in))
		if err != nil {
			t.Errorf("case %d: Parse(%s) = %v", i, c.in, err)
			continue
		}
		task, err := s.Task(now)
		if err != nil {
			t.Errorf("case %d: Task = %v", i, err)
			continue
		}
		if string(task.Payload) != c.payload || !task.ProcessAt.Equal(c.at) {
			t.Errorf("case %d: payload %q at %v, want %q at %v", i, task.Payload, task.ProcessAt, c.payload, c.at)
		}
	}
}

// Every bad input is one line that names the field.
func TestParseBad(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{``, "empty input"},
		{`{"downstream":`, "cut short"},
		{`{"downstream" "api"}`, "malformed JSON at column 15"},
		{`[1,2]`, "got a JSON array, want an object"},
		{`"task"`, "got a JSON string, want an object"},
		{`null`, "got null"},
		{`{} {}`, "unexpected data after the JSON object"},
		{`{}x`, "unexpected data after the JSON object"},
		{`{"cots":1}`, `unknown field "cots" (want one of downstream, payload`},
		{`{"downstream":5}`, "downstream: got the number 5, want a string"},
		{`{"key":{"a":1}}`, "key: got an object, want a string"},
		{`{"cost":-1}`, "cost: must not be negative, got -1"},
		{`{"cost":1.5}`, "cost: got 1.5, want an integer"},
		{`{"cost":"2"}`, `cost: got the string "2", want an integer`},
		{`{"cost":1e30}`, "cost: got 1e30, want an integer"},
		{`{"max_retry":-1}`, "max_retry: must be 0..10000, got -1"},
		{`{"max_retry":true}`, "max_retry: got true, want an integer"},
		{`{"priority":9}`, "priority: must be an integer from 1 (first) to 5 (last), got 9"},
		{`{"priority":6}`, "priority: must be an integer from 1 (first) to 5 (last), got 6"},
		{`{"priority":-1}`, "priority: must be an integer from 1 (first) to 5 (last), got -1"},
		{`{"priority":0}`, "priority: must be an integer from 1 (first) to 5 (last), got 0 (leave it out for the downstream's default)"},
		{`{"priority":1.5}`, "priority: must be an integer from 1 (first) to 5 (last), got 1.5"},
		{`{"priority":1e0}`, "priority: must be an integer from 1 (first) to 5 (last), got 1e0"},
		{`{"priority":"1"}`, `priority: must be an integer from 1 (first) to 5 (last), got the string "1"`},
		{`{"priority":true}`, "priority: must be an integer from 1 (first) to 5 (last), got true"},
		{`{"priority":[1]}`, "priority: must be an integer from 1 (first) to 5 (last), got an array"},
		{`{"priority":99999999999999999999}`, "priority: must be an integer from 1 (first) to 5 (last), got 99999999999999999999"},
		{`{"at":"tomorrow"}`, `at: invalid time "tomorrow" (want RFC 3339`},
		{`{"at":"2026-13-01T00:00:00Z"}`, "at: invalid time"},
		{`{"at":[1]}`, "at: got an array"},
		{`{"in":"5 minutes"}`, `in: invalid duration "5 minutes"`},
		{`{"in":"-5s"}`, "in: must not be negative, got -5s"},
		{`{"in":-1}`, "in: got -1, want seconds"},
		{`{"at":"2026-01-02T15:04:05Z","in":"1s"}`, "in: set both at and in"},
		{`{"timeout":"0s"}`, "timeout: must be positive"},
		{`{"payload":1,"payload_base64":"AA=="}`, "payload_base64: set both payload and payload_base64"},
		{`{"payload_base64":"!!"}`, "payload_base64: invalid base64"},
		{"{\"key\":\"a\xffb\"}", "not valid UTF-8"},
		{`{"in":"1000000h"}`, "in: must be at most 277777h46m40s (1e9 seconds, about 31 years), got 1000000h0m0s"},
		{`{"in":1e10}`, "in: got 1e10, want seconds between 0 and 1e9"},
		{`{"timeout":"1000000h"}`, "timeout: must be at most"},
		{`{"downstream":"a","cost":1,"downstream":"b"}`, "downstream: set twice"},
		{`{"payload":{"a":1,"a":2},"cost":2,"cost":3}`, "cost: set twice"},
	}
	for i, c := range cases {
		_, err := Parse([]byte(c.in))
		if err == nil {
			t.Errorf("case %d: Parse(%q) = nil, want an error containing %q", i, c.in, c.want)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || strings.ContainsAny(msg, "\n\r") || !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d: Parse(%q) = %q, want one line containing %q wrapping ErrInvalid", i, c.in, msg, c.want)
		}
	}
}

// A priority from 1 to 5 reaches queue.Task.Priority; one left out (or
// null) is 0 there, the downstream's default.
func TestParsePriority(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for i, c := range []struct {
		in   string
		want int
	}{
		{`{"downstream":"api","priority":1}`, 1},
		{`{"downstream":"api","priority":3}`, 3},
		{`{"downstream":"api","priority":5}`, 5},
		{`{"downstream":"api","priority":null}`, 0},
		{`{"downstream":"api"}`, 0},
	} {
		s, err := Parse([]byte(c.in))
		if err != nil {
			t.Errorf("case %d: Parse(%s) = %v", i, c.in, err)
			continue
		}
		task, err := s.Task(now)
		if err != nil || task.Priority != c.want {
			t.Errorf("case %d: %s: got priority %d (%v), want %d", i, c.in, task.Priority, err, c.want)
		}
	}
}

func TestTaskChecks(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for i, c := range []struct{ in, want string }{
		{`{}`, "downstream: required"},
		{`{"downstream":""}`, "downstream: required"},
		{`{"downstream":"api","unique":""}`, "unique: must not be empty"},
	} {
		s, err := Parse([]byte(c.in))
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if _, err := s.Task(now); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: Task = %v, want %q", i, err, c.want)
		}
	}
	// A Spec built in code (the CLI's flags) is checked too.
	api := "api"
	for _, p := range []int{0, 6, -1} {
		_, err := Spec{Downstream: &api, Priority: &p}.Task(now)
		if err == nil || !strings.HasPrefix(err.Error(), "priority: must be an integer from 1 (first) to 5 (last), got ") || !errors.Is(err, ErrInvalid) {
			t.Errorf("priority %d: Task = %v, want the priority error", p, err)
		}
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	d := 10 * time.Second
	at := time.Unix(2e9, 0)
	cost := int64(4)
	prio, own := 2, 1
	defaults := Spec{Downstream: str("api"), Key: str("tenant"), Cost: &cost, In: &d, Payload: []byte("x"), Unique: str("u"), Priority: &prio}
	s := Spec{Key: str("own"), At: &at}.Merge(defaults)
	if *s.Downstream != "api" || *s.Key != "own" || *s.Cost != 4 || s.In != nil || !s.At.Equal(at) ||
		string(s.Payload) != "x" || s.Unique != nil || s.Priority == nil || *s.Priority != 2 {
		t.Errorf("merged = %+v: want the line's key and at, the defaults' downstream, cost, payload and priority, no in and no unique", s)
	}
	s = Spec{}.Merge(defaults)
	if s.In == nil || *s.In != d {
		t.Errorf("merged in = %v, want the default's", s.In)
	}
	if s = (Spec{Priority: &own}).Merge(defaults); *s.Priority != 1 {
		t.Errorf("merged priority = %d, want the line's 1", *s.Priority)
	}
}

func TestOneLineAndReason(t *testing.T) {
	t.Parallel()
	if got := OneLine("a\nb\rc\td\u2028e"); got != "a b c d e" {
		t.Errorf("OneLine = %q", got)
	}
	err := errors.New("queue: invalid task: cost must not be negative, got -1")
	if got := Reason(err); got != "cost must not be negative, got -1" {
		t.Errorf("Reason = %q", got)
	}
}
