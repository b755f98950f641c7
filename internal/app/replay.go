package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/replay"
)

const replayUsage = `usage: shaper replay -config FILE [-json] [-decisions FILE] [-reorder DUR] [-progress auto|always|never] ARRIVALS.jsonl
Replays a JSON Lines log of past arrivals, one {"ts": …, "downstream": …, "key": …, "cost": …}
a line (ARRIVALS.jsonl, or - for stdin), through the config's admission, shaping and quotas,
offline on an embedded Redis, with the real scripts at each arrival's time, and prints what would
have been admitted, deferred and rejected, and how long the tasks would have waited for their slots.
The log is streamed in bounded memory. Nothing is enqueued or sent; the config's redis section is
not used.
flags:
  -config FILE      the config to try (required)
  -json             print the summary as JSON
  -decisions FILE   write one JSON line per arrival, in the log's order: its outcome, limiter, wait and slot
  -reorder DUR      how far out of time order a line may be (default 10s); a line further back is an error
  -progress WHEN    progress on stderr: auto (on a terminal, the default), always, never`

// ReplayIO are the streams of shaper replay.
type ReplayIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// StderrTTY reports a terminal on Stderr: -progress auto draws there.
	StderrTTY bool
}

// Replay runs "shaper replay" on stdin, out and the process's stderr.
func Replay(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	fi, err := os.Stderr.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
	return RunReplay(ctx, args, ReplayIO{Stdin: stdin, Stdout: out, Stderr: os.Stderr, StderrTTY: tty})
}

// RunReplay runs "shaper replay" on std.
func RunReplay(ctx context.Context, args []string, std ReplayIO) error {
	fs := flag.NewFlagSet("shaper replay", flag.ContinueOnError)
	path := fs.String("config", "", "")
	asJSON := fs.Bool("json", false, "")
	decisions := fs.String("decisions", "", "")
	reorder := fs.Duration("reorder", replay.DefaultReorder, "")
	progress := fs.String("progress", "auto", "")
	if help, err := parseSubcommand(fs, args, replayUsage, std.Stdout); help || err != nil {
		return err
	}
	switch {
	case *path == "" || fs.NArg() != 1:
		return fmt.Errorf("%w: -config and one arrivals file are required\n%s", ErrUsage, replayUsage)
	case *reorder <= 0:
		return fmt.Errorf("%w: -reorder must be more than 0, got %s", ErrUsage, *reorder)
	case *progress != "auto" && *progress != "always" && *progress != "never":
		return fmt.Errorf("%w: -progress must be auto, always or never, got %q", ErrUsage, *progress)
	}
	pl, err := loadPlan(*path)
	if err != nil {
		return err
	}
	in, size, closeIn, err := openArrivals(fs.Arg(0), std.Stdin)
	if err != nil {
		return err
	}
	defer closeIn()
	for _, n := range replay.NotModelled(pl) {
		fmt.Fprintf(std.Stderr, "replay: downstream %s: %s not modelled (see docs/operations.md#shaper-replay)\n",
			n.Downstream, strings.Join(n.Features, ", "))
	}
	opt := replay.Options{Reorder: *reorder}
	if *progress == "always" || *progress == "auto" && std.StderrTTY {
		p := newReplayProgress(std.Stderr, std.StderrTTY, size, time.Now)
		opt.Progress = p.update
		defer p.erase()
	}
	var f *os.File
	var dec *bufio.Writer
	if *decisions != "" {
		if f, err = os.Create(*decisions); err != nil {
			return err
		}
		defer f.Close()
		dec = bufio.NewWriterSize(f, 256<<10)
		enc := json.NewEncoder(dec)
		opt.Decisions = func(d replay.Decision) error { return enc.Encode(d) }
	}
	rep, err := replay.Run(ctx, pl, in, opt)
	if err != nil {
		return err
	}
	if f != nil {
		if err := errors.Join(dec.Flush(), f.Close()); err != nil {
			return fmt.Errorf("replay: writing %s: %w", *decisions, err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(std.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(std.Stdout, "replay of %d arrivals with %s\n", rep.Arrivals, *path)
	replay.Write(std.Stdout, pl, rep.Downstreams)
	return nil
}

// openArrivals opens the log name (- for stdin) and reports its size
// when it is a regular file (0 otherwise).
func openArrivals(name string, stdin io.Reader) (io.Reader, int64, func(), error) {
	if name == "-" {
		return stdin, 0, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	var size int64
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, func() { f.Close() }, nil
}

// replayProgress draws a replay's progress on stderr: on a terminal one
// line redrawn every second and erased at the end, elsewhere a line every
// 10 seconds and one at the end.
type replayProgress struct {
	w     io.Writer
	tty   bool
	size  int64
	now   func() time.Time
	start time.Time
	last  time.Time
	drawn bool // a line is drawn on the terminal
}

func newReplayProgress(w io.Writer, tty bool, size int64, now func() time.Time) *replayProgress {
	t := now()
	return &replayProgress{w: w, tty: tty, size: size, now: now, start: t, last: t}
}

func (p *replayProgress) update(s replay.Progress) {
	now := p.now()
	every := 10 * time.Second
	if p.tty {
		every = time.Second
	}
	if !s.Done && now.Sub(p.last) < every {
		return
	}
	p.last = now
	text := renderReplayProgress(s, p.size, now.Sub(p.start))
	switch {
	case p.tty && s.Done:
		p.erase()
	case p.tty:
		io.WriteString(p.w, "\r"+text+"\x1b[K")
		p.drawn = true
	default:
		io.WriteString(p.w, "replay: "+text+"\n")
	}
}

// erase erases the line drawn on the terminal, if any: at the end, and
// before an error is printed.
func (p *replayProgress) erase() {
	if p.drawn {
		io.WriteString(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// renderReplayProgress is the progress line:
//
//	[=========>          ]  45%  450000 lines  9.8k lines/s  log at 2026-01-02T15:04:05Z  1m02s left
func renderReplayProgress(s replay.Progress, size int64, elapsed time.Duration) string {
	var b strings.Builder
	frac := -1.0
	if size > 0 {
		frac = min(max(float64(s.Bytes)/float64(size), 0), 1)
		const width = 20
		n := int(frac * width)
		b.WriteString("[" + strings.Repeat("=", n))
		if n < width {
			b.WriteString(">" + strings.Repeat(" ", width-n-1))
		}
		fmt.Fprintf(&b, "] %3d%%  ", int(frac*100))
	}
	fmt.Fprintf(&b, "%d lines", s.Lines)
	if sec := elapsed.Seconds(); sec > 0 {
		b.WriteString("  " + humanLineRate(float64(s.Lines)/sec))
	}
	if !s.LogTime.IsZero() {
		b.WriteString("  log at " + s.LogTime.UTC().Format(time.RFC3339))
	}
	if s.Done {
		fmt.Fprintf(&b, "  done in %s", elapsed.Round(100*time.Millisecond))
	} else if frac > 0.01 {
		left := time.Duration(float64(elapsed) * (1 - frac) / frac)
		fmt.Fprintf(&b, "  %s left", left.Round(time.Second))
	}
	return b.String()
}

func humanLineRate(r float64) string {
	switch {
	case r >= 1e4:
		return fmt.Sprintf("%.0fk lines/s", r/1e3)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk lines/s", r/1e3)
	}
	return fmt.Sprintf("%.0f lines/s", r)
}
