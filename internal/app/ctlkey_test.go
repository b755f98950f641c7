package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/redistest"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// shaper ctl key sets, shows and clears one key's controls in Redis (what
// every process reads), and refuses what the file would refuse, one line
// each, writing nothing.
func TestCtlKey(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 100/s, fairness: {key: tenant, key_rate: 2/s}, handler: {type: log}}\n  - {name: plain, rate: 5/s, handler: {type: log}}\n")
	controls := func() map[string]shaping.KeyControl {
		m, err := shaping.NewControl(redistest.Client(t), prefix).KeyControls(context.Background(), "api")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, step := range []struct {
		args []string
		out  string
	}{
		{[]string{"key", "api", "acme", "rate", "20/s"}, `api: key "acme" capped at 20/s in every process`},
		{[]string{"key", "api", "acme", "weight", "3"}, `api: key "acme" weighted 3`},
		{[]string{"key", "api", "bob", "pause"}, `api: key "bob" paused`},
		{[]string{"key", "api", "carol", "rate", "5"}, `capped at 5/s`},
	} {
		out, err := ctl(step.args...)
		if err != nil || !strings.Contains(out, step.out) {
			t.Errorf("ctl %s: %q, %v; want %q", strings.Join(step.args, " "), out, err, step.out)
		}
	}
	m := controls()
	if m["acme"].Rate.RateString() != "20/s" || m["acme"].Weight != 3 || !m["bob"].Paused || m["carol"].Rate.RateString() != "5/s" {
		t.Errorf("key controls in Redis: %+v", m)
	}
	if out, err := ctl("key", "api"); err != nil || !strings.Contains(out, `"acme": {`) || !strings.Contains(out, `"rate": "20/s"`) || !strings.Contains(out, `"paused": true`) {
		t.Errorf("ctl key api: %q, %v; want every key control as JSON", out, err)
	}
	for _, args := range [][]string{{"key", "api", "bob", "resume"}, {"key", "api", "acme", "clear"}, {"key", "api", "carol", "rate", "clear"}} {
		if _, err := ctl(args...); err != nil {
			t.Errorf("ctl %s: %v", strings.Join(args, " "), err)
		}
	}
	if m := controls(); len(m) != 0 {
		t.Errorf("after resume and clears: %+v, want none", m)
	}
	for _, step := range []struct {
		args []string
		want string
	}{
		{[]string{"key", "api", "acme", "rate", "200/s"}, `above the downstream's rate "100/s"`},
		{[]string{"key", "api", "acme", "rate", "1/25h"}, `slower than one task per key`},
		{[]string{"key", "api", "acme", "rate", "fast"}, `invalid rate "fast"`},
		{[]string{"key", "api", "acme", "weight", "0.0000001e20"}, `weight must be in (0, 1e+06]`},
		{[]string{"key", "api", "acme", "weight", "-1"}, `weight must be in`},
		{[]string{"key", "api", "acme", "shout"}, `unknown action "shout"`},
		{[]string{"key", "api", "acme", "rate"}, `"rate" takes 1 value(s), got 0`},
		{[]string{"key", "api", "acme"}, `want an action`},
		{[]string{"key", "plain", "acme", "pause"}, `downstream "plain" has no fairness`},
		{[]string{"key", "nope", "acme", "pause"}, `unknown downstream "nope" (the config has api, plain)`},
		{[]string{"key", "api", "", "pause"}, `a key must be 1 to 1024 bytes`},
	} {
		_, err := ctl(step.args...)
		if !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), step.want) || strings.ContainsAny(err.Error(), "\n") {
			t.Errorf("ctl %q: %v, want one usage line containing %q", step.args, err, step.want)
		}
	}
	if m := controls(); len(m) != 0 {
		t.Errorf("after refused changes: %+v, want none written", m)
	}
}

// ctl explain of a task parked in fair order says when an operator
// paused its key (and how to resume it), and notes a key's runtime rate.
func TestCtlExplainKeyControls(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 1/s, fairness: {key: tenant}, handler: {type: log}}\n")
	p := queue.NewProducer(redistest.Client(t), queue.ProducerConfig{Prefix: prefix,
		Fair: map[string]queue.FairShare{"api": {Fairness: &shaping.Fairness{}, Rate: limiters.PerSecond(1)}}})
	defer p.Close()
	var last queue.Receipt
	for range 4 { // at 1/s two go to the queue, the rest wait in fair order
		r, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Key: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		last = r
	}
	if out, err := ctl("explain", "api", last.ID); err != nil || !strings.Contains(out, "is pending") || !strings.Contains(out, "in fair order, for its key's turn") {
		t.Fatalf("explain of a parked task: %q, %v", out, err)
	}
	if _, err := ctl("key", "api", "bob", "rate", "1/2s"); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("explain", "api", last.ID); err != nil || !strings.Contains(out, "an operator capped its key at 1/2s") {
		t.Errorf("explain with a key rate: %q, %v", out, err)
	}
	if _, err := ctl("key", "api", "bob", "pause"); err != nil {
		t.Fatal(err)
	}
	if out, err := ctl("explain", "api", last.ID); err != nil || !strings.Contains(out, `its key "bob" is paused by an operator`) || !strings.Contains(out, "shaper ctl key api bob resume") {
		t.Errorf("explain with the key paused: %q, %v", out, err)
	}
}

// ctl status takes no arguments: an extra word is a usage error, not
// ignored.
func TestCtlStatusTakesNoArguments(t *testing.T) {
	t.Parallel()
	_, ctl := ctlOn(t, "  - {name: api, rate: 5/s, handler: {type: log}}\n")
	if _, err := ctl("status", "extra"); !errors.Is(err, app.ErrUsage) || !strings.Contains(err.Error(), `"status" takes no arguments`) {
		t.Errorf("ctl status extra: %v, want a usage error", err)
	}
	if out, err := ctl("status"); err != nil || !strings.Contains(out, `"name": "api"`) {
		t.Errorf("ctl status: %q, %v", out, err)
	}
}

// ctl explain of a queued task counts the tasks of a higher priority that
// are taken before it.
func TestCtlExplainHigherPriorityAhead(t *testing.T) {
	t.Parallel()
	prefix, ctl := ctlOn(t, "  - {name: api, rate: 1/s, priority: {}, handler: {type: log}}\n")
	p := queue.NewProducer(redistest.Client(t), queue.ProducerConfig{Prefix: prefix, Priority: map[string]int{"api": 0}})
	defer p.Close()
	ids := map[int]string{}
	for _, prio := range []int{1, 1, 3, 5} {
		r, err := p.Enqueue(context.Background(), queue.Task{Downstream: "api", Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		ids[prio] = r.ID
	}
	for prio, want := range map[int]string{5: "; 3 task(s) of a higher priority wait ahead of it", 3: "; 2 task(s) of a higher priority"} {
		if out, err := ctl("explain", "api", ids[prio]); err != nil || !strings.Contains(out, want) {
			t.Errorf("explain of the task of priority %d: %q, %v; want %q", prio, out, err, want)
		}
	}
	if out, err := ctl("explain", "api", ids[1]); err != nil || strings.Contains(out, "higher priority") {
		t.Errorf("explain of a task of priority 1: %q, %v; want nothing ahead", out, err)
	}
}
