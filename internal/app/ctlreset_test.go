package app_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/shaping"
)

const resetDownstreams = "  - {name: api, rate: 10/s, quotas: [{limit: 5, per: 1h}], breaker: {}, handler: {type: log}}\n" +
	"  - {name: db, rate: 100/s, handler: {type: log}}\n"

// usageLine fails t unless err is one ErrUsage line containing want.
func usageLine(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("ctl %s: %v, want one usage line containing %q", what, err, want)
	}
}

// shaper ctl reset NAME reports exactly the holds it found (the bucket
// ahead, the announced limit, each quota's count), deletes them, and says
// "nothing to clear" when there was none: it never reports a state it did
// not touch.
func TestCtlReset(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, resetDownstreams)
	rdb := redistest.Client(t)
	ctx := context.Background()
	ks := keys.New(prefix)
	bs := shaping.NewBuckets(rdb, prefix)
	quota := shaping.Quota{Limit: 5, Per: time.Hour}
	b := shaping.Bucket{Name: "api", Rate: limiters.PerSecond(10), Quotas: []shaping.Quota{quota}}
	if bs.Key("api") != ks.Bucket("api") {
		t.Fatalf("the bucket's key %q is not the one reset clears (%q)", bs.Key("api"), ks.Bucket("api"))
	}
	pushBack := func() {
		_, err := bs.PushBack(ctx, b, 10*time.Minute)
		noErr(t, err)
	}
	useQuota := func() { // a reservation counts in the quota; its bucket key is dropped
		r, err := bs.Reserve(ctx, b, 1, time.Second)
		noErr(t, err)
		if !r.OK {
			t.Fatalf("reservation refused: %+v", r)
		}
		noErr(t, rdb.Del(ctx, ks.Bucket("api")).Err())
	}
	announce := func() { // as answer.lua stores "0 left for 30 min"
		until := time.Now().Add(30 * time.Minute).UnixMicro()
		noErr(t, rdb.HSet(ctx, ks.Announced("api"), "left", 0, "until", until, "seq", 1, "remaining", 0,
			"limit", 0, "src", "ratelimit", "at", time.Now().UnixMicro()).Err())
		noErr(t, rdb.PExpire(ctx, ks.Announced("api"), 30*time.Minute).Err())
	}
	const after = "; every process releases at the rate within a second\n"
	nothing := "api: nothing to clear (no bucket ahead, no announced limit, no quota use)\n"
	for i, step := range []struct {
		seed []func()
		want string
	}{
		{nil, nothing},
		{[]func(){announce}, "api: cleared announced limit" + after},
		{[]func(){useQuota}, "api: cleared quota 5/1h0m0s" + after},
		{[]func(){pushBack}, "api: cleared bucket (next_free)" + after},
		{[]func(){useQuota, pushBack, announce}, "api: cleared bucket (next_free), announced limit, quota 5/1h0m0s" + after},
		{nil, nothing},
	} {
		for _, f := range step.seed {
			f()
		}
		out, err := ctl("reset", "api")
		if err != nil || out != step.want {
			t.Errorf("step %d: ctl reset api = %q, %v; want %q", i, out, err, step.want)
		}
		if left := heldKeys(t, rdb, prefix); len(left) > 0 {
			t.Errorf("step %d: after the reset Redis still holds %q", i, left)
		}
	}
	// db has no quota and nothing held
	if out, err := ctl("reset", "db"); err != nil || out != "db: nothing to clear (no bucket ahead, no announced limit, no quota use)\n" {
		t.Errorf("ctl reset db = %q, %v; want nothing to clear", out, err)
	}
	_, err := ctl("reset", "nope")
	usageLine(t, "reset nope", err, `unknown downstream "nope" (the config has api, db)`)
	_, err = ctl("reset")
	usageLine(t, "reset", err, `"reset" takes 1 argument(s)`)
	_, err = ctl("reset", "api", "now")
	usageLine(t, "reset api now", err, `"reset" takes 1 argument(s)`)
}

// heldKeys lists api's hold keys still in Redis: its bucket, its announced
// limit, its quotas.
func heldKeys(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	ks := keys.New(prefix)
	var out []string
	for _, k := range []string{ks.Bucket("api"), ks.Announced("api")} {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n > 0 {
			out = append(out, k)
		}
	}
	qs, err := redistest.ScanKeys(ctx, rdb, ks.Quota("api", "*"))
	noErr(t, err)
	return append(out, qs...)
}

// shaper ctl breaker NAME open|close|clear sets the breaker's state in
// Redis and says what it was; a bad verb, a downstream without a breaker,
// an unknown downstream and a missing verb are one usage line each, and
// write nothing.
func TestCtlBreaker(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, resetDownstreams)
	rdb := redistest.Client(t)
	ctx := context.Background()
	key := keys.New(prefix).Breaker("api")
	state := func() string { // "open", "closed" (no key) or the raw st field
		st, err := rdb.HGet(ctx, key, "st").Result()
		if errors.Is(err, redis.Nil) {
			return "closed"
		}
		noErr(t, err)
		if n, _ := strconv.Atoi(st); shaping.BreakerMode(n) == shaping.BreakerOpen {
			return "open"
		}
		return "st=" + st
	}
	const opened, closed = "now open for its cool-down, then probing", "now closed (counts forgotten)"
	for i, step := range []struct {
		verb, was, now, state string
	}{
		{"open", "closed", opened, "open"},
		{"open", "open", opened, "open"},
		{"close", "open", closed, "closed"},
		{"close", "closed", closed, "closed"},
		{"open", "closed", opened, "open"},
		{"clear", "open", closed, "closed"},
	} {
		out, err := ctl("breaker", "api", step.verb)
		want := "api: breaker was " + step.was + ", " + step.now + " in every process within a second\n"
		if err != nil || out != want {
			t.Errorf("step %d: ctl breaker api %s = %q, %v; want %q", i, step.verb, out, err, want)
		}
		if got := state(); got != step.state {
			t.Errorf("step %d: after ctl breaker api %s the breaker in Redis is %s, want %s", i, step.verb, got, step.state)
		}
	}
	noErr(t, rdb.Del(ctx, key).Err())
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"breaker", "api", "flip"}, `breaker takes open, close or clear, got "flip"`},
		{[]string{"breaker", "api", "OPEN"}, `breaker takes open, close or clear, got "OPEN"`},
		{[]string{"breaker", "nope", "open"}, `unknown downstream "nope" (the config has api, db)`},
		{[]string{"breaker", "db", "open"}, `downstream "db" has no circuit breaker`},
		{[]string{"breaker", "api"}, `"breaker" takes 2 argument(s)`},
		{[]string{"breaker", "api", "open", "now"}, `"breaker" takes 2 argument(s)`},
	} {
		out, err := ctl(step.args...)
		usageLine(t, strings.Join(step.args, " "), err, step.want)
		if out != "" {
			t.Errorf("ctl %s printed %q beside its error, want nothing", strings.Join(step.args, " "), out)
		}
		if got := state(); got != "closed" {
			t.Errorf("ctl %s left the breaker %s, want it untouched (closed)", strings.Join(step.args, " "), got)
		}
	}
}

// noErr fails t at once on err.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
