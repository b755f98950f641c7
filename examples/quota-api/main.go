// Command quota-api runs shaper in front of a stand-in third-party API with
// a daily quota, in one process, and prints what happened.
//
// The stand-in (api, below) allows -daily calls a day, counted from 00:00
// UTC, and -per-second calls in each second; past either it answers 429.
// Every answer announces the per-second window (X-RateLimit-*, and the
// IETF RateLimit and RateLimit-Policy fields) and the call's cost
// (X-Request-Cost). shaper.yaml configures shaper with the same daily
// quota and a rate well above the API's per-second limit, so the quota and
// the headers, not the rate, set the pace: the tasks within the quota are
// delivered once each without a single 429, and the rest wait in the queue
// for the next UTC day, no attempt used and nothing archived.
//
//	go run ./examples/quota-api                          # embedded Redis
//	go run ./examples/quota-api -tasks 300 -daily 200 -per-second 40 -redis redis://127.0.0.1:6379 -prefix qa1
package main

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/shaper-io/shaper/internal/app"
	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/plan"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

//go:embed shaper.yaml
var shaperYAML []byte

// api stands in for a third-party API with a daily quota (UTC days) and a
// per-second limit (fixed windows of one second), both counted in calls.
type api struct {
	daily, perSecond int

	mu          sync.Mutex
	day         string // the UTC date usedToday counts
	usedToday   int
	second      int64 // the Unix second usedThisSec counts
	usedThisSec int
	mostInASec  int
	refused     int            // 429s
	delivered   map[string]int // accepted calls per Idempotency-Key (the task id)
	last        time.Time      // the last accepted call
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	now := time.Now().UTC()
	a.mu.Lock()
	defer a.mu.Unlock()
	if d := now.Format(time.DateOnly); d != a.day {
		a.day, a.usedToday = d, 0
	}
	if s := now.Unix(); s != a.second {
		a.second, a.usedThisSec = s, 0
	}
	ok := a.usedToday < a.daily && a.usedThisSec < a.perSecond
	if ok {
		a.usedToday++
		a.usedThisSec++
		a.mostInASec = max(a.mostInASec, a.usedThisSec)
		a.delivered[r.Header.Get("Idempotency-Key")]++
		a.last = now
	}
	// Like most APIs, it announces the window that runs out soonest: what
	// is left of this second. X-RateLimit-Reset is a Unix time with
	// milliseconds; RateLimit's t is whole seconds, rounded up.
	next := time.Unix(a.second+1, 0)
	left := strconv.Itoa(a.perSecond - a.usedThisSec)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(a.perSecond))
	h.Set("X-RateLimit-Remaining", left)
	h.Set("X-RateLimit-Reset", fmt.Sprintf("%.3f", float64(next.UnixMilli())/1e3))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"second";q=%d;w=1, "day";q=%d;w=86400`, a.perSecond, a.daily))
	h.Set("RateLimit", `"second";r=`+left+`;t=1`)
	if !ok {
		a.refused++
		if a.usedToday >= a.daily {
			next = now.Truncate(24 * time.Hour).Add(24 * time.Hour)
		}
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(next.Sub(now).Seconds()))))
		http.Error(w, `{"error":"rate limit exceeded"}`, http.StatusTooManyRequests)
		return
	}
	h.Set("X-Request-Cost", "1")
	h.Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"sent":true,"used_today":%d}`, a.usedToday)
}

// options are the command's flags.
type options struct {
	Tasks, Daily, PerSecond int
	Redis, Prefix           string // Redis "" means an embedded one; Prefix "" keeps shaper.yaml's
}

// report is what a run saw.
type report struct {
	Enqueued   []string       // task ids
	Delivered  map[string]int // accepted calls per task id, as the API counted them
	Refused    int            // 429s the API answered
	UsedToday  int            // calls the API counted against its daily quota
	MostInASec int            // most calls the API accepted in one second
	Took       time.Duration  // from the dispatcher's start to the last accepted call
	HeldBy     string         // what holds the rest ("quota 100/24h0m0s@0s")
	Reset      time.Time      // when the quota resets
	Waiting    queue.Backlog  // the queue after shutdown
	Retried    int            // attempts used by the tasks still waiting
}

func main() {
	var o options
	flag.IntVar(&o.Tasks, "tasks", 150, "tasks to enqueue")
	flag.IntVar(&o.Daily, "daily", 100, "the API's daily quota, and shaper's quotas[0].limit")
	flag.IntVar(&o.PerSecond, "per-second", 20, "the API's calls per second (announced in its headers)")
	flag.StringVar(&o.Redis, "redis", "", "Redis URL (default: an embedded in-process Redis)")
	flag.StringVar(&o.Prefix, "prefix", "", "Redis key prefix (default: shaper.yaml's)")
	flag.Parse()
	if _, err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quota-api:", err)
		os.Exit(1)
	}
}

func run(o options, out io.Writer) (report, error) {
	var rep report
	if o.Tasks < 1 || o.Daily < 1 || o.PerSecond < 1 {
		return rep, errors.New("-tasks, -daily and -per-second must be at least 1")
	}
	a := &api{daily: o.Daily, perSecond: o.PerSecond, delivered: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	cfg, err := config.Parse(shaperYAML)
	if err != nil {
		return rep, err
	}
	dc := &cfg.Downstreams[0]
	dc.Quotas[0].Limit, dc.Handler.URL = int64(o.Daily), "http://"+ln.Addr().String()+"/v1/messages"
	cfg.Redis.Prefix = cmp.Or(o.Prefix, cfg.Redis.Prefix)
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	pl, err := plan.Build(cfg)
	if err != nil {
		return rep, err
	}
	rdb, stop, err := connect(o.Redis)
	if err != nil {
		return rep, err
	}
	defer stop()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dcfg := pl.Dispatcher
	dcfg.Logger = quiet
	d := shaping.New(rdb, dcfg)
	ds := pl.Downstreams[0].Shaping
	ds.Handler = shaping.HTTPHandler(*pl.Downstreams[0].Handler.HTTP)
	if err := d.Add(ds); err != nil {
		return rep, err
	}
	pl.Producer.Logger = quiet
	p := queue.NewProducer(rdb, pl.Producer)
	defer p.Close()
	ctx := context.Background()
	for i := range o.Tasks {
		r, err := p.Enqueue(ctx, queue.Task{Downstream: ds.Name, Payload: fmt.Appendf(nil, `{"to":"user-%d","text":"hello"}`, i)})
		if err != nil {
			return rep, err
		}
		rep.Enqueued = append(rep.Enqueued, r.ID)
	}
	fmt.Fprintf(out, "stand-in API at %s: %d calls a day (from 00:00 UTC), %d a second, announced in its headers\n", ln.Addr(), o.Daily, o.PerSecond)
	fmt.Fprintf(out, "shaper: rate %s, quota %d/24h aligned at 00:00 UTC, cost from X-Request-Cost; %d tasks enqueued\n",
		ds.Rate.RateString(), o.Daily, o.Tasks)

	begin := time.Now()
	if err := d.Start(); err != nil {
		return rep, err
	}
	rep.HeldBy, rep.Reset, err = awaitHold(d, a, ds.Name, o)
	if err == nil {
		time.Sleep(500 * time.Millisecond) // a moment to show that nothing more goes out
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = errors.Join(err, d.Shutdown(sctx)) // held tasks go back to the queue
	w, retried, werr := waiting(ctx, rdb, pl.Prefix, ds.Name, o.Tasks)
	rep.Waiting, rep.Retried = w, retried
	a.mu.Lock()
	rep.Delivered, rep.Refused, rep.UsedToday, rep.MostInASec, rep.Took = a.delivered, a.refused, a.usedToday, a.mostInASec, a.last.Sub(begin)
	a.mu.Unlock()
	printReport(out, rep, o)
	return rep, errors.Join(err, werr)
}

// awaitHold waits until the API has taken the tasks within its quota and,
// with more tasks than that, the quota holds the rest; it returns what
// holds them and when the quota resets.
func awaitHold(d *shaping.Dispatcher, a *api, name string, o options) (string, time.Time, error) {
	want := min(o.Tasks, o.Daily)
	deadline := time.Now().Add(time.Duration(want/o.PerSecond+30) * time.Second)
	for {
		a.mu.Lock()
		n := a.usedToday
		a.mu.Unlock()
		l, _ := d.Limits(name)
		if n >= want && (o.Tasks <= o.Daily || strings.HasPrefix(l.HeldBy, "quota")) {
			if len(l.Quotas) == 0 {
				return l.HeldBy, time.Time{}, nil
			}
			return l.HeldBy, l.Quotas[0].Reset, nil
		}
		if time.Now().After(deadline) {
			return "", time.Time{}, fmt.Errorf("%d of %d calls delivered before the deadline (held by %q)", n, want, l.HeldBy)
		}
		time.Sleep(20 * time.Millisecond) // progress poll
	}
}

// waiting is the queue's backlog and the attempts its waiting tasks used.
func waiting(ctx context.Context, rdb redis.UniversalClient, prefix, name string, n int) (queue.Backlog, int, error) {
	in := queue.NewInspector(rdb, prefix)
	b, err := in.Counts(ctx, name)
	if err != nil {
		return b, 0, err
	}
	qn, retried := keys.New(prefix).Queue(name), 0
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){in.Asynq().ListPendingTasks, in.Asynq().ListScheduledTasks} {
		ts, err := list(qn, asynq.PageSize(n))
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			return b, 0, err
		}
		for _, t := range ts {
			retried += t.Retried
		}
	}
	return b, retried, nil
}

func printReport(out io.Writer, r report, o options) {
	twice := 0
	for _, c := range r.Delivered {
		twice += max(c-1, 0)
	}
	fmt.Fprintf(out, "delivered %d tasks in %.1fs (%.1f/s), %d more than once; the API answered 429 %d times\n",
		len(r.Delivered), r.Took.Seconds(), float64(r.UsedToday)/r.Took.Seconds(), twice, r.Refused)
	fmt.Fprintf(out, "the API counted %d of its %d calls today; most in one second: %d of %d\n", r.UsedToday, o.Daily, r.MostInASec, o.PerSecond)
	if r.HeldBy != "" {
		fmt.Fprintf(out, "held by %s until %s (in %s)\n", r.HeldBy, r.Reset.UTC().Format(time.DateTime+" MST"), time.Until(r.Reset).Round(time.Minute))
	}
	w := r.Waiting
	fmt.Fprintf(out, "waiting in the queue: %d (pending %d, scheduled %d, retry %d); archived %d; attempts used by them %d\n",
		w.Total(), w.Pending, w.Scheduled, w.Retry, w.Archived, r.Retried)
}

// connect opens Redis at url, or an embedded one when url is "".
func connect(url string) (redis.UniversalClient, func(), error) {
	if url == "" {
		addr, stop, err := app.StartEmbedded()
		if err != nil {
			return nil, nil, err
		}
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		return rdb, func() { rdb.Close(); stop() }, nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(opt)
	return rdb, func() { rdb.Close() }, nil
}
