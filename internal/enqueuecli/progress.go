package enqueuecli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// console writes stderr lines and, on a terminal, a progress bar that the
// lines scroll above: a line first erases the bar, the next tick redraws it.
type console struct {
	mu    sync.Mutex
	w     io.Writer
	bar   bool // a bar is drawn on the current line
	on    bool // progress enabled
	stats func() progressStats
	start time.Time
	stop  chan struct{}
	done  chan struct{}
}

type progressStats struct {
	tasks, accepted, deferred, rejected, collapsed, invalid, failed int
	read, total                                                     int64 // bytes; total 0 = unknown
}

func newConsole(w io.Writer) *console { return &console{w: w} }

// line writes one line (a message must not contain a line break).
func (c *console) line(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
	fmt.Fprintf(c.w, format+"\n", args...)
}

func (c *console) clear() {
	if c.bar {
		io.WriteString(c.w, "\r\x1b[K")
		c.bar = false
	}
}

// startProgress draws the bar every interval until stopProgress.
func (c *console) startProgress(stats func() progressStats, every time.Duration) {
	c.on, c.stats, c.start = true, stats, time.Now()
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			c.draw()
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// stopProgress stops the ticker and erases the bar.
func (c *console) stopProgress() {
	if !c.on {
		return
	}
	close(c.stop)
	<-c.done
	c.mu.Lock()
	c.clear()
	c.mu.Unlock()
}

func (c *console) draw() {
	s := c.stats()
	text := renderProgress(s, time.Since(c.start))
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(c.w, "\r"+text+"\x1b[K")
	c.bar = true
}

// renderProgress is the bar's text, at most about 80 columns:
//
//	[=========>          ]  45%  450 tasks  400 accepted  0 deferred  50 rejected  1.2k/s
func renderProgress(s progressStats, elapsed time.Duration) string {
	var b strings.Builder
	if s.total > 0 {
		frac := float64(s.read) / float64(s.total)
		frac = min(max(frac, 0), 1)
		const width = 20
		n := int(frac * width)
		b.WriteString("[")
		b.WriteString(strings.Repeat("=", n))
		if n < width {
			b.WriteString(">")
			b.WriteString(strings.Repeat(" ", width-n-1))
		}
		fmt.Fprintf(&b, "] %3d%%  ", int(frac*100))
	}
	fmt.Fprintf(&b, "%d %s  %d accepted  %d deferred  %d rejected", s.tasks, plural(s.tasks, "task", "tasks"), s.accepted, s.deferred, s.rejected)
	if s.collapsed > 0 {
		fmt.Fprintf(&b, "  %d collapsed", s.collapsed)
	}
	if s.invalid > 0 {
		fmt.Fprintf(&b, "  %d invalid", s.invalid)
	}
	if s.failed > 0 {
		fmt.Fprintf(&b, "  %d failed", s.failed)
	}
	if elapsed > 0 {
		b.WriteString("  " + humanRate(float64(s.tasks)/elapsed.Seconds()))
	}
	return b.String()
}

func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.1fM/s", r/1e6)
	case r >= 1e4:
		return fmt.Sprintf("%.0fk/s", r/1e3)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk/s", r/1e3)
	}
	return fmt.Sprintf("%.0f/s", r)
}

// plural is one or many by n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
