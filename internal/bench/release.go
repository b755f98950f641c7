package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Release-path rounds of ScenarioRelease, as the -rounds flag takes them:
// all run real `shaper` processes.
const (
	RoundEconomy = "economy" // Redis commands and scripts per released task, next to raw asynq
	RoundKeepup  = "keepup"  // achieved/configured rate and most releases in any 1 s
	RoundIdle    = "idle"    // idle commands/s, connections, goroutines, RSS, start time by downstreams
	RoundKill    = "kill"    // held tasks and the extra delay after a kill -9
	RoundPause   = "pause"   // active tasks while throttled, paused and resumed
	RoundFair    = "fair"    // a late small tenant's wait with and without fair share
)

// AllRounds lists the release-path rounds in run order.
func AllRounds() []string {
	return []string{RoundEconomy, RoundKeepup, RoundIdle, RoundKill, RoundPause, RoundFair, RoundPriority, RoundFairScale, RoundKeyRate, RoundKeyCap}
}

// ReleaseReport holds the rounds of ScenarioRelease that ran.
type ReleaseReport struct {
	Economy []EconomyRow `json:"economy,omitempty"`
	Keepup  []KeepupRow  `json:"keepup,omitempty"`
	Idle    []IdleRow    `json:"idle,omitempty"`
	Kill    *KillRow     `json:"kill,omitempty"`
	Pause   *PauseRow    `json:"pause,omitempty"` // pause.go
	Fair    []FairRow    `json:"fair,omitempty"`

	Priority  []PriorityRow  `json:"priority,omitempty"`  // priority.go
	FairScale []FairScaleRow `json:"fairscale,omitempty"` // fairscale.go
	KeyRate   []KeyRateRow   `json:"keyrate,omitempty"`   // keyrate.go
	KeyCap    []KeyCapRow    `json:"keycap,omitempty"`    // keycap.go
}

// releaseDefaults fills the release-path fields of o.
func (o Options) releaseDefaults() Options {
	dur := func(d *time.Duration, full, quick time.Duration) {
		if *d == 0 {
			*d = full
			if o.Quick {
				*d = quick
			}
		}
	}
	if len(o.ReleaseRounds) == 0 {
		o.ReleaseRounds = AllRounds()
	}
	if len(o.EconomyRates) == 0 {
		o.EconomyRates = []int{50, 200, 1000}
	}
	if o.EconomyProcs == 0 {
		o.EconomyProcs = 3
	}
	dur(&o.EconomyDrain, 10*time.Second, 5*time.Second)
	if len(o.KeepupRates) == 0 {
		o.KeepupRates = []int{50, 200, 1000}
	}
	if len(o.ReleaseProcs) == 0 {
		o.ReleaseProcs = []int{1, 3}
	}
	dur(&o.KeepupDrain, 10*time.Second, 5*time.Second)
	if len(o.IdleLevels) == 0 {
		o.IdleLevels = []int{1, 100, 500}
	}
	dur(&o.IdleWarmup, 3*time.Second, 3*time.Second)
	dur(&o.IdleWindow, 10*time.Second, 5*time.Second)
	o.KillRate, o.KillProcs, o.KillBacklog = cmp.Or(o.KillRate, 50), cmp.Or(o.KillProcs, 3), cmp.Or(o.KillBacklog, 1000)
	dur(&o.KillAfter, 5*time.Second, 5*time.Second)
	dur(&o.KillLimit, 150*time.Second, 150*time.Second)
	o.FairRate, o.FairProcs = cmp.Or(o.FairRate, 50), cmp.Or(o.FairProcs, 3)
	o.FairTasksA, o.FairTasksBC = cmp.Or(o.FairTasksA, 1000), cmp.Or(o.FairTasksBC, 100)
	dur(&o.FairDelay, 3*time.Second, 3*time.Second)
	o.Pause = o.Pause.withDefaults()
	o.Priority = o.Priority.withDefaults()
	o.FairScale = o.FairScale.withDefaults(o.Quick)
	o.KeyRate = o.KeyRate.withDefaults(o.Quick)
	o.KeyCap = o.KeyCap.withDefaults(o.Quick)
	return o
}

func (o Options) validateRelease() error {
	for _, r := range o.ReleaseRounds {
		if !slices.Contains(AllRounds(), r) {
			return fmt.Errorf("bench: unknown round %q (want some of %s)", r, strings.Join(AllRounds(), ","))
		}
	}
	for _, c := range []struct {
		name string
		xs   []int
	}{{"economy rate", o.EconomyRates}, {"keepup rate", o.KeepupRates}, {"release process count", o.ReleaseProcs},
		{"idle downstream count", o.IdleLevels}, {"economy process count", []int{o.EconomyProcs}},
		{"kill rate", []int{o.KillRate}}, {"fair rate", []int{o.FairRate}}, {"fair process count", []int{o.FairProcs}},
		{"fair round's tasks of A", []int{o.FairTasksA}}, {"fair round's tasks of B and C", []int{o.FairTasksBC}}} {
		for _, x := range c.xs {
			if x < 1 {
				return fmt.Errorf("bench: %s must be >= 1, got %d", c.name, x)
			}
		}
	}
	if o.KillProcs < 2 || o.KillBacklog < 2 {
		return fmt.Errorf("bench: kill round needs >= 2 processes and a backlog >= 2, got %d and %d", o.KillProcs, o.KillBacklog)
	}
	return errors.Join(o.Pause.validate(), o.Priority.validate(), o.FairScale.validate(), o.KeyRate.validate(), o.KeyCap.validate())
}

// release runs the selected rounds.
func (e *env) release(ctx context.Context) *ReleaseReport {
	o := e.opts
	r := &ReleaseReport{}
	has := func(s string) bool { return slices.Contains(o.ReleaseRounds, s) && ctx.Err() == nil }
	if has(RoundEconomy) {
		r.Economy = e.economy(ctx)
	}
	if has(RoundKeepup) {
		r.Keepup = e.keepup(ctx)
	}
	if has(RoundIdle) {
		r.Idle = e.idle(ctx)
	}
	if has(RoundKill) {
		e.logf("kill: %d processes at %d/s, backlog %d, kill -9 of one %s after the first delivery ...", o.KillProcs, o.KillRate, o.KillBacklog, o.KillAfter)
		k := e.kill(ctx)
		e.logf("kill: %d active at the kill, %d stranded, %.0f recovered, last of them %.1f s after it; run %.1f s (ideal %.1f); lost %d, duplicates %d%s",
			k.ActiveAtKill, k.Stranded, k.Recovered, k.LastActiveS, k.RunS, k.IdealS, k.Lost, k.Duplicates, errSuffix(k.Error))
		r.Kill = &k
	}
	if has(RoundPause) {
		po := o.Pause
		e.logf("pause: %d processes at %d/s, backlog %d, paused %s after the first delivery for %s ...", po.Procs, po.Rate, po.Backlog, po.After, po.Hold)
		p := e.pause(ctx)
		e.logf("pause: active %d max / %.1f mean throttled, %d at the pause, 0 after %.2f s, %d max from 2 s on; %d delivered after the pause (%d from 2 s on); first after the resume %.2f s; lost %d, duplicates %d%s",
			p.ThrottledMax, p.ThrottledMean, p.ActiveAtPause, p.ZeroAfterS, p.PausedMax, p.ReleasedAfter, p.ReleasedPaused,
			p.FirstAfterResumeS, p.Lost, p.Duplicates, errSuffix(p.Error))
		r.Pause = &p
	}
	if has(RoundFair) {
		r.Fair = e.fair(ctx)
	}
	if has(RoundPriority) {
		r.Priority = e.priority(ctx)
	}
	if has(RoundFairScale) {
		r.FairScale = e.fairScale(ctx)
	}
	if has(RoundKeyRate) {
		r.KeyRate = e.keyRate(ctx)
	}
	if has(RoundKeyCap) {
		r.KeyCap = e.keyCap(ctx)
	}
	return r
}

// markdown renders the release-path section.
func (r *ReleaseReport) markdown(o Options) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### 7. Release path (real `shaper` processes, default config unless a row says otherwise)\n\n")
	if len(r.Economy) > 0 {
		w("#### 7a. Redis work per released task (%d processes, %s of backlog per rate; INFO commandstats, scripts' own commands included)\n\n",
			o.EconomyProcs, o.EconomyDrain)
		t := table{head: []string{"rate", "contender", "workers per process", "delivered", "commands per task", "scripts per task",
			"vs raw asynq", "achieved (/s)", "top commands"}, align: "rlrrrrrrl"}
		for _, x := range r.Economy {
			vs := "1"
			if x.Contender != econRaw {
				vs = num(x.VsRaw, 2) + "×"
			}
			del := fmt.Sprintf("%d/%d", x.Delivered, x.Tasks)
			if x.Error != "" {
				del += " (" + x.Error + ")"
			}
			ach := num(x.Achieved, 1)
			if x.Contender == econRaw {
				ach += " (no limit)"
			}
			t.add(fmt.Sprintf("%d/s", x.Rate), x.Contender, fmt.Sprint(x.Workers), del, num(x.CmdsPerTask, 1),
				num(x.ScriptsPerTask, 2), vs, ach, "`"+x.Top+"`")
		}
		w("%s\n", t.String())
	}
	if len(r.Keepup) > 0 {
		w("#### 7b. Keep-up and bursts (default workers, %s of backlog per rate; achieved over the drain without its first second)\n\n", o.KeepupDrain)
		t := table{head: []string{"rate", "P", "workers per process", "delivered", "achieved (/s)", "keep-up",
			"max in any 1 s at release", "max in any 1 s by slot", "max in any 1 s at the sink", "duplicates"}, align: "rrrrrrrrrr"}
		for _, x := range r.Keepup {
			del := fmt.Sprintf("%d/%d", x.Delivered, x.Backlog)
			if x.Error != "" {
				del += " (" + x.Error + ")"
			}
			t.add(fmt.Sprintf("%d/s", x.Rate), fmt.Sprint(x.Processes), fmt.Sprint(x.Workers), del, num(x.Achieved, 1),
				num(x.KeepUpPct, 1)+"%", fmt.Sprintf("%d (limit %d)", x.MaxIn1sRelease, x.Rate+1), fmt.Sprint(x.MaxIn1sSlot), fmt.Sprint(x.MaxIn1sSink),
				fmt.Sprint(x.Releases-x.Delivered))
		}
		w("%s\n", t.String())
	}
	if len(r.Idle) > 0 {
		w("#### 7c. Idle cost (downstreams at 10/s, log handler, no task; %s warm-up, commands over %s)\n\n", o.IdleWarmup, o.IdleWindow)
		w("%s\n", idleTable(r.Idle))
		if m := idleMarginal(r.Idle); m != "" {
			w("%s\n\n", m)
		}
	}
	if k := r.Kill; k != nil {
		w("#### 7d. kill -9 of one of %d processes at %d/s (backlog %d, default workers)\n\n", k.Processes, k.Rate, k.Backlog)
		t := table{head: []string{"workers per process", "killed at", "active at the kill (all processes)",
			"of them not delivered within 5 s", "recovered by the survivors", "last of them delivered", "run (first to last delivery)", "ideal", "extra",
			"lost", "duplicates"}, align: "rrrrrrrrrrr"}
		last := "never"
		if k.LastActiveS >= 0 {
			last = fmt.Sprintf("%.1f s after the kill", k.LastActiveS)
		}
		run := num(k.RunS, 1) + " s"
		if !k.Complete {
			run = fmt.Sprintf("incomplete after %s", o.KillLimit)
		}
		rec := "–"
		if k.Recovered >= 0 {
			rec = num(k.Recovered, 0)
		}
		t.add(fmt.Sprint(k.Workers), num(k.KilledAtS, 1)+" s", fmt.Sprint(k.ActiveAtKill), fmt.Sprint(k.Stranded), rec, last,
			run, num(k.IdealS, 1)+" s", num(k.ExtraS, 1)+" s", fmt.Sprint(k.Lost), fmt.Sprint(k.Duplicates))
		w("%s\n", t.String())
		if k.Error != "" {
			w("Error: %s\n\n", k.Error)
		}
	}
	if len(r.Fair) > 0 {
		w("#### 7e. Fair share (%d processes at %d/s, default workers; A enqueues %s tasks, %s later B and C %s each; waits by release time after B's enqueue)\n\n",
			o.FairProcs, o.FairRate, inum(int64(o.FairTasksA)), o.FairDelay, inum(int64(o.FairTasksBC)))
		w("%s\n", fairTable(r.Fair))
	}
	b.WriteString(r.priorityMarkdown())
	b.WriteString(r.fairScaleMarkdown(o.FairScale))
	b.WriteString(r.keyRateMarkdown())
	b.WriteString(r.keyCapMarkdown())
	b.WriteString(r.pauseMarkdown())
	return b.String()
}

func idleTable(rows []IdleRow) string {
	t := table{head: []string{"who", "downstreams", "P", "commands/s", "per downstream per process", "connections per process",
		"goroutines per process", "RSS per process (MB)", "start to serving (s)", "top commands"}, align: "lrrrrrrrrl"}
	for _, x := range rows {
		if x.Error != "" && x.CmdsPerS == 0 {
			t.add(x.Who, fmt.Sprint(x.Downstreams), fmt.Sprint(x.Processes), "error: "+x.Error, "", "", "", "", "", "")
			continue
		}
		g, rss, st := "–", "–", "–"
		if x.Goroutines >= 0 {
			g = num(x.Goroutines, 0)
		}
		if x.Who == "shaper" {
			rss, st = num(x.RSSMB, 1), num(x.StartS, 2)
		}
		t.add(x.Who, fmt.Sprint(x.Downstreams), fmt.Sprint(x.Processes), num(x.CmdsPerS, 1), num(x.PerDsProc, 2),
			num(x.Connections, 1), g, rss, st, "`"+x.Top+"`")
	}
	return t.String()
}

// idleMarginal is what one more downstream costs a single process: the
// difference between the largest and smallest downstream counts at P=1.
func idleMarginal(rows []IdleRow) string {
	var lo, hi *IdleRow
	for i := range rows {
		x := &rows[i]
		if x.Who != "shaper" || x.Processes != 1 || x.Error != "" {
			continue
		}
		if lo == nil || x.Downstreams < lo.Downstreams {
			lo = x
		}
		if hi == nil || x.Downstreams > hi.Downstreams {
			hi = x
		}
	}
	if lo == nil || hi == nil || hi.Downstreams == lo.Downstreams {
		return ""
	}
	n := float64(hi.Downstreams - lo.Downstreams)
	return fmt.Sprintf("Per extra downstream in one process (%d vs %d downstreams): %s commands/s, %s connections, %s goroutines, %s KB RSS.",
		hi.Downstreams, lo.Downstreams, num((hi.CmdsPerS-lo.CmdsPerS)/n, 2), num((hi.Connections-lo.Connections)/n, 2),
		num((hi.Goroutines-lo.Goroutines)/n, 1), num((hi.RSSMB-lo.RSSMB)*1024/n, 0))
}
