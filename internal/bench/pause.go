package bench

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shaper-io/shaper/internal/control"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/testsink"
)

// PauseOptions configure round "pause"; zero fields take the defaults.
type PauseOptions struct {
	Rate    int           // default 50
	Procs   int           // default 3
	Backlog int           // default 600
	After   time.Duration // from the first delivery to the pause; default 3s
	Hold    time.Duration // paused this long, then resumed; default 5s
}

func (p PauseOptions) withDefaults() PauseOptions {
	p.Rate, p.Procs, p.Backlog = cmp.Or(p.Rate, 50), cmp.Or(p.Procs, 3), cmp.Or(p.Backlog, 600)
	p.After, p.Hold = cmp.Or(p.After, 3*time.Second), cmp.Or(p.Hold, 5*time.Second)
	return p
}

func (p PauseOptions) validate() error {
	if p.Rate < 1 || p.Procs < 1 || p.Backlog < 2 || p.Hold < 2*time.Second {
		return fmt.Errorf("bench: pause round needs a rate, processes, a backlog >= 2 and a hold >= 2s, got %d, %d, %d, %s",
			p.Rate, p.Procs, p.Backlog, p.Hold)
	}
	return nil
}

// PauseRow is round "pause": P shaper processes (default config) drain a
// backlog at the rate; After after the first delivery the downstream is
// paused (shaper ctl pause: the control key and its announcement) for
// Hold, then resumed. The queue's asynq active list (every process's
// taken tasks, waiting for a slot or in a call) is sampled every 50 ms.
type PauseRow struct {
	Rate      int `json:"rate_per_s"`
	Processes int `json:"processes"`
	Workers   int `json:"workers_per_process"`
	Backlog   int `json:"backlog"`
	// ThrottledMax and ThrottledMean are the active list over the second
	// before the pause, while the backlog drains at the rate.
	ThrottledMax  int     `json:"throttled_max_active"`
	ThrottledMean float64 `json:"throttled_mean_active"`
	// ActiveAtPause is the active list at the first sample after the pause
	// was set (within 50 ms);
	// ZeroAfterS how long until it was first empty (−1: not while paused).
	ActiveAtPause int     `json:"active_at_pause"`
	ZeroAfterS    float64 `json:"zero_after_s"`
	// PausedMax is the most active from 2 s after the pause to the resume.
	PausedMax int `json:"paused_max_active"`
	// ReleasedAfter counts deliveries that arrived after the pause was
	// set (calls under way and releases before each process saw it);
	// ReleasedPaused those from 2 s after the pause to the resume.
	ReleasedAfter  int `json:"released_after_pause"`
	ReleasedPaused int `json:"released_while_paused"`
	// FirstAfterResumeS is the resume to the first delivery after it.
	FirstAfterResumeS float64 `json:"first_after_resume_s"`
	Delivered         int     `json:"delivered"`
	Lost              int     `json:"lost"`
	Duplicates        int     `json:"duplicates"`
	Complete          bool    `json:"complete"`
	Error             string  `json:"error,omitempty"`
}

// activeSample is the queue's active list length at a time.
type activeSample struct {
	at time.Time
	n  int
}

func (e *env) pause(ctx context.Context) PauseRow {
	o := e.opts.Pause
	row := PauseRow{Rate: o.Rate, Processes: o.Procs, Backlog: o.Backlog, ZeroAfterS: -1, FirstAfterResumeS: -1}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("pause")
	f, first, err := e.servingBacklog(ctx, prefix, sink, o.Rate, o.Procs, o.Backlog)
	if f != nil {
		defer func() { keepFirst(&row.Error, f.stop(ctx)) }()
		row.Workers = f.workers()
	}
	if err != nil {
		row.Error = err.Error()
		return row
	}
	stop := e.sampleActive(ctx, keys.New(prefix).Asynq(downstream).Active())
	sleepCtx(ctx, time.Until(first.Add(o.After)))
	ctl := control.New(e.rdb, prefix)
	if err := ctl.SetPaused(ctx, downstream, true); err != nil {
		stop()
		row.Error = fmt.Sprintf("pause: %v", err)
		return row
	}
	pausedAt := time.Now()
	sleepCtx(ctx, o.Hold)
	if err := ctl.SetPaused(ctx, downstream, false); err != nil {
		stop()
		row.Error = fmt.Sprintf("resume: %v", err)
		return row
	}
	resumedAt := time.Now()
	row.Complete = pollUntil(ctx, resumedAt.Add(2*time.Duration(o.Backlog)*time.Second/time.Duration(o.Rate)+30*time.Second),
		20*time.Millisecond, func() bool { return sink.DistinctOK() >= o.Backlog })
	if row.Complete {
		sleepCtx(ctx, time.Second) // a duplicate trailing the last delivery is seen too
	}
	fillPause(&row, stop(), sink.OK(), pausedAt, resumedAt)
	return row
}

// sampleActive reads the LLEN of list every 50 ms until the returned
// stop is called, which returns the samples.
func (e *env) sampleActive(ctx context.Context, list string) (stop func() []activeSample) {
	var mu sync.Mutex
	var out []activeSample
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if n, err := e.rdb.LLen(ctx, list).Result(); err == nil {
				mu.Lock()
				out = append(out, activeSample{time.Now(), int(n)})
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() []activeSample {
		close(done)
		wg.Wait()
		return out
	}
}

// fillPause computes the columns from the active samples, the sink's hits
// and the pause's and resume's times.
func fillPause(row *PauseRow, samples []activeSample, hits []testsink.Hit, pausedAt, resumedAt time.Time) {
	var sum, n int
	atPause := false // the first sample at or after the pause is read
	for _, s := range samples {
		switch {
		case s.at.Before(pausedAt) && s.at.After(pausedAt.Add(-time.Second)):
			row.ThrottledMax = max(row.ThrottledMax, s.n)
			sum, n = sum+s.n, n+1
		case !s.at.Before(pausedAt) && s.at.Before(resumedAt):
			if !atPause {
				row.ActiveAtPause, atPause = s.n, true
			}
			if s.n == 0 && row.ZeroAfterS < 0 {
				row.ZeroAfterS = round(s.at.Sub(pausedAt).Seconds(), 2)
			}
			if s.at.Sub(pausedAt) >= 2*time.Second {
				row.PausedMax = max(row.PausedMax, s.n)
			}
		}
	}
	if n > 0 {
		row.ThrottledMean = round(float64(sum)/float64(n), 1)
	}
	seen := map[string]bool{}
	for _, h := range hits {
		if seen[h.Payload] {
			row.Duplicates++
			continue
		}
		seen[h.Payload] = true
		switch {
		case h.At.After(pausedAt) && h.At.Before(resumedAt):
			row.ReleasedAfter++
			if h.At.Sub(pausedAt) >= 2*time.Second {
				row.ReleasedPaused++
			}
		case !h.At.Before(resumedAt):
			if d := h.At.Sub(resumedAt).Seconds(); row.FirstAfterResumeS < 0 || d < row.FirstAfterResumeS {
				row.FirstAfterResumeS = round(d, 2)
			}
		}
	}
	row.Delivered = len(seen)
	row.Lost = row.Backlog - row.Delivered
}

func (r *ReleaseReport) pauseMarkdown() string {
	p := r.Pause
	if p == nil {
		return ""
	}
	t := table{head: []string{"workers per process", "active throttled (max / mean, 1 s before the pause)", "active at the pause",
		"active 0 after", "active from 2 s after the pause (max)", "deliveries after the pause", "of them from 2 s after it",
		"first delivery after the resume", "delivered", "lost", "duplicates"}, align: "rrrrrrrrrrr"}
	zero := "not while paused"
	if p.ZeroAfterS >= 0 {
		zero = num(p.ZeroAfterS, 2) + " s"
	}
	first := "none"
	if p.FirstAfterResumeS >= 0 {
		first = num(p.FirstAfterResumeS, 2) + " s"
	}
	del := fmt.Sprintf("%d/%d", p.Delivered, p.Backlog)
	if !p.Complete {
		del += " (incomplete)"
	}
	t.add(fmt.Sprint(p.Workers), fmt.Sprintf("%d / %s", p.ThrottledMax, num(p.ThrottledMean, 1)), fmt.Sprint(p.ActiveAtPause), zero,
		fmt.Sprint(p.PausedMax), fmt.Sprint(p.ReleasedAfter), fmt.Sprint(p.ReleasedPaused), first, del, fmt.Sprint(p.Lost), fmt.Sprint(p.Duplicates))
	s := fmt.Sprintf("#### 7i. Pause of a downstream draining at %d/s (%d processes, default config, backlog %d)\n\n%s\n",
		p.Rate, p.Processes, p.Backlog, t.String())
	if p.Error != "" {
		s += "Error: " + p.Error + "\n\n"
	}
	return s
}
