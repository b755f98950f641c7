package config

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-io/shaper/limiters"
)

// A rate is parsed when the file is read; a bad one is reported at its
// field and line, in the order validation finds it, and a value that is not
// a scalar gets the decoder's wording for a string field.
func TestRate(t *testing.T) {
	t.Parallel()
	c := mustParse(t, "downstreams:\n  - name: a\n    rate: 3000/m\n    schedule: [{cron: \"0 8 * * *\", rate: 5/s}]\n"+
		"    adaptive: {floor: 1/s, step: 2/s}\n    handler: {type: log}\n    admission: {limiters: [{rate: 10/s}]}\n")
	d := c.Downstreams[0]
	for _, tt := range []struct {
		what string
		got  Rate
		text string
		want limiters.Limit
	}{
		{"rate", d.Rate, "3000/m", limiters.PerMinute(3000)},
		{"schedule[0].rate", d.Schedule[0].Rate, "5/s", limiters.PerSecond(5)},
		{"adaptive.floor", d.Adaptive.Floor, "1/s", limiters.PerSecond(1)},
		{"adaptive.step", d.Adaptive.Step, "2/s", limiters.PerSecond(2)},
		{"limiters[0].rate", d.Admission.Limiters[0].Rate, "10/s", limiters.PerSecond(10)},
	} {
		if tt.got.String() != tt.text || tt.got.Limit() != tt.want || tt.got.IsZero() {
			t.Errorf("%s: got %q %v (zero %v), want %q %v", tt.what, tt.got.String(), tt.got.Limit(), tt.got.IsZero(), tt.text, tt.want)
		}
	}
	if !d.Adaptive.Ceiling.IsZero() || !d.Adaptive.Ceiling.Limit().IsZero() {
		t.Errorf("a rate left out: got %q %v, want the zero Rate", d.Adaptive.Ceiling.String(), d.Adaptive.Ceiling.Limit())
	}

	for _, tt := range []struct{ doc, want string }{
		{"downstreams:\n  - name: a\n    rate: [50/s]\n    handler: {type: log}\n", `config: line 3: downstreams[0].rate: got a list, want a string`},
		{"downstreams:\n  - name: a\n    rate: {n: 50}\n    handler: {type: log}\n", `config: line 3: downstreams[0].rate: got a mapping, want a string`},
		// Validation order: the bad name before the bad rate that follows it.
		{"downstreams:\n  - name: '..'\n    rate: fast\n    handler: {type: log}\n", `config: line 2: downstreams[0].name: invalid name ".."`},
		// A decoding error alone: the bad rate is not one of them.
		{"downstreams:\n  - name: a\n    rate: fast\n    bogus: 1\n    handler: {type: log}\n", `config: line 4: downstreams[0].bogus: unknown field "bogus" (want one of name, rate, burst, max_wait, capacity, max_cost, max_hold, rate_headers, concurrency, key_concurrency, lease, fairness, collapse, collapse_window, priority, workers, max_retry, retention, handler, admission, schedule, timezone, adaptive, batch, breaker, quotas, shaping_mode, on_late)`},
		{"downstreams:\n  - name: a\n    rate: 1/s\n    adaptive: {floor: 1/s, ceiling: fast}\n    handler: {type: log}\n", `config: line 4: downstreams[0].adaptive.ceiling: invalid rate "fast"`},
	} {
		if _, err := Parse([]byte(tt.doc)); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v\nwant prefix %s", tt.doc, err, tt.want)
		}
	}

	r, err := ParseRate("fast")
	if err == nil || r.String() != "fast" || !r.Limit().IsZero() || r.IsZero() {
		t.Errorf(`ParseRate("fast") = %q %v, %v; want the text kept, a zero Limit and an error`, r.String(), r.Limit(), err)
	}
	if r := RateOf(limiters.PerSecond(4).WithBurst(8)); r.String() != "4/s" || r.Limit() != limiters.PerSecond(4).WithBurst(8) {
		t.Errorf("RateOf = %q %v", r.String(), r.Limit())
	}
	y, _ := yaml.Marshal(struct{ R Rate }{MustRate("2.5/s")})
	j, _ := json.Marshal(struct{ R Rate }{MustRate("2.5/s")})
	if string(y) != "r: 2.5/s\n" || string(j) != `{"R":"2.5/s"}` {
		t.Errorf("marshalled: YAML %q, JSON %s; want the rate as written", y, j)
	}
}

// A rate in the file is written as everywhere else (ctl rate, enqueue
// --rate, PUT …/rate): a bare number is per second, and d is a unit with
// or without a count. The YAML number 20 is the rate "20".
func TestRateForms(t *testing.T) {
	t.Parallel()
	for i, tt := range []struct {
		yaml string
		want limiters.Limit
	}{
		{"20", limiters.PerSecond(20)},
		{"2.5", limiters.Limit{Rate: 5, Period: 2 * time.Second, Burst: 5}},
		{`"20"`, limiters.PerSecond(20)},
		{"20/s", limiters.PerSecond(20)},
		{"1/d", limiters.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1}},
		{"1/1d", limiters.Limit{Rate: 1, Period: 24 * time.Hour, Burst: 1}},
		{"5/1d12h", limiters.Limit{Rate: 5, Period: 36 * time.Hour, Burst: 5}},
		{"0", limiters.Limit{}},
		{"-1", limiters.Limit{}},
		{"1/1dd", limiters.Limit{}},
	} {
		var v struct{ R Rate }
		if err := yaml.Unmarshal([]byte("r: "+tt.yaml), &v); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if v.R.Limit() != tt.want {
			t.Errorf("step %d: rate: %s is %v, want %v", i, tt.yaml, v.R.Limit(), tt.want)
		}
	}
	c := accepted(t, one("rate: 20\nadmission: {limiters: [{rate: 2}]}\n"))
	if d := c.Downstreams[0]; d.Rate.Limit() != limiters.PerSecond(20) || d.Admission.Limiters[0].Rate.Limit() != limiters.PerSecond(2) {
		t.Errorf("rate: 20 and a limiter's rate: 2: got %v and %v, want 20/s and 2/s", d.Rate.Limit(), d.Admission.Limiters[0].Rate.Limit())
	}
	refused(t, one("rate: 0\n"), "downstreams[0].rate", `invalid rate "0": a rate must be positive`)
}

// config checks a file without the dispatcher: it must not import shaping
// (internal/plan derives the dispatcher's values).
func TestNoShapingImport(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			if p := strings.Trim(im.Path.Value, `"`); p == "github.com/shaper-io/shaper/shaping" || p == "github.com/shaper-io/shaper/queue" {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
