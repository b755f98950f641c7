package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/testsink"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// RoundPriority is the release-path round that measures urgent tasks'
// latency behind a backlog, with priority and without (FIFO).
const RoundPriority = "priority"

// PriorityOptions size round "priority". Zero fields take the defaults.
type PriorityOptions struct {
	Rate    int // releases/s; default 50
	Procs   int // shaper processes; default 2
	Backlog int // tasks of priority 5 enqueued before the processes start; default 1000
	Urgent  int // tasks of priority 1 enqueued one after another later; default 20
	// After is how many releases the sink must have seen before the
	// urgent tasks are enqueued (releases under way); default Rate.
	After int
	// Hold keeps a run with priority going until this long after the
	// first urgent enqueue, so the rate is measured over a few seconds of
	// backlog; default 5s. A FIFO run lasts until the urgent tasks, last
	// in the queue, are released.
	Hold time.Duration
	// Fair adds modes "strict+fair" and "weighted+fair": the same load on
	// a downstream with fairness, the backlog spread over Tenants keys.
	// Off in the zero value; cmd/shaperbench turns it on (-priority-fair).
	Fair    bool
	Tenants int // backlog keys of the fair modes; default 10
}

func (p PriorityOptions) withDefaults() PriorityOptions {
	p.Rate, p.Procs = cmp.Or(p.Rate, 50), cmp.Or(p.Procs, 2)
	p.Backlog, p.Urgent = cmp.Or(p.Backlog, 1000), cmp.Or(p.Urgent, 20)
	p.After, p.Hold = cmp.Or(p.After, p.Rate), cmp.Or(p.Hold, 5*time.Second)
	p.Tenants = cmp.Or(p.Tenants, 10)
	return p
}

func (p PriorityOptions) validate() error {
	if p.Rate < 1 || p.Procs < 1 || p.Urgent < 1 || p.After < 1 || p.Backlog <= p.After {
		return fmt.Errorf("bench: priority round needs rate, processes, urgent tasks and releases before them >= 1 and a backlog above those releases, got %d, %d, %d, %d and %d",
			p.Rate, p.Procs, p.Urgent, p.After, p.Backlog)
	}
	if p.Fair && (p.Tenants < 2 || p.Tenants > p.Backlog) {
		return fmt.Errorf("bench: priority round's fair modes need 2 to %d (the backlog) tenants, got %d", p.Backlog, p.Tenants)
	}
	return nil
}

// PriorityRow is round "priority": Procs shaper processes, one downstream
// at Rate with the default config apart from its priority setting. Backlog
// tasks of priority 5 wait; once the sink has seen After releases, Urgent
// tasks of priority 1 are enqueued one after another. In FIFO mode (no
// priority setting) both are plain tasks, so the urgent ones wait behind
// the backlog. In the fair modes the downstream also has fairness by
// tenant and the backlog is Tenants keys' (priorityRun says which task
// is whose). The producer is the one the daemon builds from the same
// config (internal/plan). Times are release times (X-Shaper-Released).
type PriorityRow struct {
	Mode      string `json:"mode"`
	Priority  string `json:"priority,omitempty"` // the YAML value; "" is FIFO
	Fairness  string `json:"fairness,omitempty"` // the YAML value; "" is none
	Tenants   int    `json:"tenants,omitempty"`  // keys of the backlog (fair modes)
	Rate      int    `json:"rate_per_s"`
	Processes int    `json:"processes"`
	Workers   int    `json:"workers_per_process"`
	Backlog   int    `json:"backlog"`
	Urgent    int    `json:"urgent"`
	// Delivered counts distinct tasks by the end of the run (a run with
	// priority ends with most of the backlog still waiting); Duplicates
	// are deliveries beyond the first of a task.
	Delivered  int  `json:"delivered"`
	Duplicates int  `json:"duplicates"`
	UrgentDone int  `json:"urgent_released"`
	Complete   bool `json:"complete"` // every urgent task released
	// LatP50S, LatP95S and LatMaxS are over the urgent tasks, each from
	// its own enqueue to its first release.
	LatP50S float64 `json:"urgent_latency_p50_s"`
	LatP95S float64 `json:"urgent_latency_p95_s"`
	LatMaxS float64 `json:"urgent_latency_max_s"`
	// FirstS is the first urgent task's latency; AllS runs from the first
	// urgent enqueue to the last urgent release; EnqueueS from the first
	// urgent enqueue to the last.
	FirstS   float64 `json:"urgent_first_s"`
	AllS     float64 `json:"urgent_all_s"`
	EnqueueS float64 `json:"urgent_enqueue_s"`
	// Meanwhile counts the backlog's releases from the first urgent
	// enqueue to the last urgent release.
	Meanwhile int `json:"backlog_released_meanwhile"`
	// Achieved is releases per second over the run without its first
	// second (there is a backlog throughout); MaxIn1s the most releases
	// in any 1 s.
	Achieved float64 `json:"achieved_per_s"`
	MaxIn1s  int     `json:"max_in_any_1s_at_release"`
	// Jain (fair modes) is Jain's index of the backlog tenants' releases
	// over the run (1: even shares; 1/Tenants: one tenant took all).
	// UrgentKeyShare is the urgent tasks' key's part of those releases
	// over 1/Tenants: 1 when its urgent tasks cost its backlog nothing,
	// below 1 when fair share charged them to its turns.
	Jain           float64 `json:"jain,omitempty"`
	UrgentKeyShare float64 `json:"urgent_key_share,omitempty"`
	RunS           float64 `json:"run_s"`
	Error          string  `json:"error,omitempty"`
}

// priorityMode is one way the priority round runs the same load.
type priorityMode struct {
	name, setting string // setting "" is FIFO
	fair          bool   // fairness: priorityFairness, the backlog over Tenants keys
}

// priorityWeights are the weighted modes' setting. With fairness the
// backlog waits at level 3 (weight 2), so urgent tasks get 4 takes to
// its 1 there, against 8 to 1 over a backlog at level 5.
const priorityWeights = "{weights: {1: 8, 2: 4, 3: 2, 4: 1, 5: 1}}"

// priorityFairness is the fair modes' fairness setting.
const priorityFairness = "{key: tenant}"

func priorityModes(fair bool) []priorityMode {
	ms := []priorityMode{{"FIFO", "", false}, {"strict", "{}", false}, {"weighted", priorityWeights, false}}
	if fair {
		ms = append(ms, priorityMode{"strict+fair", "{}", true}, priorityMode{"weighted+fair", priorityWeights, true})
	}
	return ms
}

// The round's payload tags (tenantTask.T); in the fair modes the
// backlog's are its tenants instead.
const (
	tagBacklog = "backlog"
	tagUrgent  = "urgent"
)

func (e *env) priority(ctx context.Context) []PriorityRow {
	po := e.opts.Priority
	var rows []PriorityRow
	for _, m := range priorityModes(po.Fair) {
		e.logf("priority: %s, %d processes at %d/s, %d waiting, then %d urgent ...", m.name, po.Procs, po.Rate, po.Backlog, po.Urgent)
		row := e.priorityRun(ctx, m)
		fair := ""
		if m.fair {
			fair = fmt.Sprintf("; Jain %.4f over %d tenants, the urgent key's share %.2f of fair", row.Jain, row.Tenants, row.UrgentKeyShare)
		}
		e.logf("priority: %s: urgent latency p50 %.3f p95 %.3f max %.3f s, first %.3f s, all %.3f s, %d of the backlog meanwhile; %.1f/s, max %d in 1 s%s; run %.1f s%s",
			m.name, row.LatP50S, row.LatP95S, row.LatMaxS, row.FirstS, row.AllS, row.Meanwhile, row.Achieved, row.MaxIn1s, fair, row.RunS, errSuffix(row.Error))
		rows = append(rows, row)
		if ctx.Err() != nil {
			break
		}
	}
	return rows
}

// priorityLoad is what one mode enqueues: whose tasks, at which priority.
type priorityLoad struct {
	extra     []string // the downstream's fields beyond rate and handler
	tenants   []string // the backlog's payload tags, which are its keys when keyed
	keyed     bool     // tasks carry their tenant as Key
	low, high int      // the backlog's and the urgent tasks' priority; 0: plain
	urgentKey string   // "" unless keyed
}

func priorityLoadOf(m priorityMode, po PriorityOptions) priorityLoad {
	if !m.fair {
		l := priorityLoad{tenants: []string{tagBacklog}}
		if m.setting != "" {
			l.extra, l.low, l.high = []string{"priority: " + m.setting}, priority.Last, priority.First
		}
		return l
	}
	// With fairness only the default level waits in fair order (the
	// others go by priority alone), so the backlog is at 3, not 5.
	// The urgent tasks are t00's, a backlog tenant's: fair order alone
	// would hold them behind t00's own backlog at a tenth of the rate
	// (about 20 s here), so a release within strict priority's bounds is
	// priority's doing, and UrgentKeyShare shows whether fair share
	// charges them to t00's turns. A new tenant would not tell the two
	// apart: fair share alone releases its first task within a second.
	l := priorityLoad{extra: []string{"priority: " + m.setting, "fairness: " + priorityFairness}, keyed: true,
		low: priority.Default, high: priority.First}
	for i := range po.Tenants {
		l.tenants = append(l.tenants, fmt.Sprintf("t%02d", i))
	}
	l.urgentKey = l.tenants[0]
	return l
}

// enqueueBacklog enqueues the backlog tenant by tenant, each one's tasks
// in a row (first in, first out would serve t00 alone first, so even
// shares are fair order's doing), and returns each task's enqueue by
// tenant and sequence number.
func (l priorityLoad) enqueueBacklog(ctx context.Context, p *queue.Producer, n int) (map[string][]time.Time, error) {
	enq := map[string][]time.Time{}
	for i, k := range l.tenants {
		key, c := "", n/len(l.tenants)
		if i < n%len(l.tenants) {
			c++
		}
		if l.keyed {
			key = k
		}
		at, err := enqueueLevel(ctx, p, k, key, c, l.low)
		enq[k] = at
		if err != nil {
			return enq, err
		}
	}
	return enq, nil
}

// priorityRun runs one mode: the backlog, the processes, the urgent tasks.
func (e *env) priorityRun(ctx context.Context, m priorityMode) PriorityRow {
	po := e.opts.Priority
	row := PriorityRow{Mode: m.name, Priority: m.setting, Rate: po.Rate, Processes: po.Procs, Backlog: po.Backlog, Urgent: po.Urgent}
	sink := testsink.New()
	defer sink.Close()
	prefix := e.prefix("priority")
	load := priorityLoadOf(m, po)
	if m.fair {
		row.Fairness, row.Tenants = priorityFairness, len(load.tenants)
	}
	cfg := e.shaperYAML(prefix, httpDownstream(downstream, po.Rate, 0, sink.URL(), load.extra...))
	p, err := planProducer(e, cfg)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	defer p.Close()
	backlog, err := load.enqueueBacklog(ctx, p, po.Backlog)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	start := time.Now()
	f, err := e.launch(ctx, prefix, po.Procs, cfg, time.Minute)
	if err != nil {
		row.Error = err.Error()
		return row
	}
	row.Workers = f.workers()
	limit := start.Add(2*time.Duration(float64(po.Backlog+po.Urgent)/float64(po.Rate)*float64(time.Second)) + 30*time.Second)
	var urgent []time.Time
	err = func() error {
		if !pollUntil(ctx, limit, 10*time.Millisecond, func() bool { return sink.Count() >= po.After }) {
			return fmt.Errorf("%d releases before the urgent tasks, want %d", sink.Count(), po.After)
		}
		if urgent, err = enqueueLevel(ctx, p, tagUrgent, load.urgentKey, po.Urgent, load.high); err != nil {
			return err
		}
		if !pollUntil(ctx, limit, 20*time.Millisecond, func() bool { return countTag(sink.OK(), tagUrgent) >= po.Urgent }) {
			return fmt.Errorf("%d of %d urgent tasks released by %s", countTag(sink.OK(), tagUrgent), po.Urgent, limit.Sub(start).Round(time.Second))
		}
		if m.setting != "" {
			sleepCtx(ctx, time.Until(urgent[0].Add(po.Hold)))
		}
		return nil
	}()
	row.RunS = round(time.Since(start).Seconds(), 1)
	if serr := f.stop(ctx); serr != nil && err == nil {
		err = serr
	}
	keepFirst(&row.Error, err)
	hits := sink.OK()
	fillPriority(&row, backlog, urgent, hits)
	if m.fair {
		fillPriorityFair(&row, backlog, hits, load.urgentKey)
	}
	return row
}

// enqueueLevel enqueues n tasks tagged tag with key key at priority prio
// (0: the downstream's default) one after another and returns when each
// enqueue began.
func enqueueLevel(ctx context.Context, p *queue.Producer, tag, key string, n, prio int) ([]time.Time, error) {
	at := make([]time.Time, 0, n)
	for i := range n {
		b, _ := json.Marshal(tenantTask{tag, i})
		at = append(at, time.Now())
		if _, err := p.Enqueue(ctx, queue.Task{Downstream: downstream, Key: key, Payload: b, Priority: prio}); err != nil {
			return at, fmt.Errorf("enqueue %s #%d: %w", tag, i, err)
		}
	}
	return at, nil
}

// countTag is how many distinct tasks tagged tag the hits hold.
func countTag(hits []testsink.Hit, tag string) int {
	seen := map[int]bool{}
	for _, h := range hits {
		var t tenantTask
		if json.Unmarshal([]byte(h.Payload), &t) == nil && t.T == tag {
			seen[t.N] = true
		}
	}
	return len(seen)
}

// fillPriority computes the measured columns of row from the backlog's
// and the urgent tasks' enqueue times (by tag and sequence number) and
// the sink's hits.
func fillPriority(row *PriorityRow, backlog map[string][]time.Time, urgent []time.Time, hits []testsink.Hit) {
	enq := maps.Clone(backlog)
	enq[tagUrgent] = urgent
	rel, delivered, dups := tenantReleases(enq, hits)
	row.Delivered, row.Duplicates = delivered, dups
	all := releaseTimes(hits)
	row.Achieved = round(keepUpRate(all, time.Second), 2)
	row.MaxIn1s = testsink.MaxInWindow(all, time.Second)
	w := taskWaits(urgent, rel[tagUrgent])
	row.UrgentDone = len(w)
	row.Complete = len(urgent) > 0 && len(w) == len(urgent)
	if len(w) == 0 {
		return
	}
	row.LatP50S, row.LatP95S, row.LatMaxS = round(percentile(w, 0.5), 3), round(percentile(w, 0.95), 3), round(percentile(w, 1), 3)
	ur := rel[tagUrgent]
	_, last := spanOf(ur)
	if !ur[0].IsZero() {
		row.FirstS = round(ur[0].Sub(urgent[0]).Seconds(), 3)
	}
	row.AllS = round(last.Sub(urgent[0]).Seconds(), 3)
	row.EnqueueS = round(urgent[len(urgent)-1].Sub(urgent[0]).Seconds(), 3)
	for k := range backlog {
		row.Meanwhile += testsink.Between(rel[k], urgent[0], last)
	}
}

// fillPriorityFair computes a fair mode's Jain's index and the urgent
// key's share from the backlog's enqueue times by tenant and the hits.
// It counts each tenant's releases up to the last release, or to the
// last of a tenant whose backlog ran out first (it then has no share to
// claim); a tenant never released counts 0, so a broken share shows.
func fillPriorityFair(row *PriorityRow, backlog map[string][]time.Time, hits []testsink.Hit, urgentKey string) {
	rel, _, _ := tenantReleases(backlog, hits)
	tenants := slices.Sorted(maps.Keys(backlog))
	var to time.Time
	for _, k := range tenants {
		if _, last := spanOf(rel[k]); last.After(to) {
			to = last
		}
	}
	for _, k := range tenants {
		if _, last := spanOf(rel[k]); releasedBy(rel[k], last) == len(backlog[k]) && last.Before(to) {
			to = last
		}
	}
	counts := make([]float64, len(tenants))
	var total float64
	for i, k := range tenants {
		counts[i] = float64(releasedBy(rel[k], to))
		total += counts[i]
	}
	if total == 0 {
		return
	}
	row.Jain = round(shaping.Jain(counts), 4)
	if i := slices.Index(tenants, urgentKey); i >= 0 {
		row.UrgentKeyShare = round(counts[i]/total*float64(len(tenants)), 3)
	}
}

// releasedBy is how many of the releases rel (zero: not released) came
// by to.
func releasedBy(rel []time.Time, to time.Time) int {
	n := 0
	for _, t := range rel {
		if !t.IsZero() && !t.After(to) {
			n++
		}
	}
	return n
}

// priorityMarkdown renders round "priority", "" if it did not run.
func (r *ReleaseReport) priorityMarkdown() string {
	if len(r.Priority) == 0 {
		return ""
	}
	x0 := r.Priority[0]
	interval := time.Second / time.Duration(x0.Rate)
	var b strings.Builder
	fmt.Fprintf(&b, "#### 7f. Priority under a backlog (%d processes at %d/s, default workers; %s tasks of priority 5 wait, releases under way, then %d of priority 1 arrive one after another; FIFO: all plain tasks; latency by release time from each task's enqueue)\n\n",
		x0.Processes, x0.Rate, inum(int64(x0.Backlog)), x0.Urgent)
	fmt.Fprintf(&b, "Bounds for strict priority: the first urgent task within 2 intervals + 100 ms (%s), all within %d intervals + 300 ms (%s) of the first enqueue; at most %d in any 1 s.\n\n",
		2*interval+100*time.Millisecond, x0.Urgent, time.Duration(x0.Urgent)*interval+300*time.Millisecond, x0.Rate+1)
	if i := slices.IndexFunc(r.Priority, func(x PriorityRow) bool { return x.Fairness != "" }); i >= 0 {
		fmt.Fprintf(&b, "Fair modes: the backlog is %d tenants' (keys t00…, enqueued tenant by tenant) at priority 3, the level fair share orders; the urgent tasks are t00's. Jain's index is over the backlog tenants' releases in the run; the urgent key's share is t00's part of them over 1/%d.\n\n",
			r.Priority[i].Tenants, r.Priority[i].Tenants)
	}
	b.WriteString(priorityTable(r.Priority))
	b.WriteString("\n")
	return b.String()
}

// priorityTable renders the priority round's rows.
func priorityTable(rows []PriorityRow) string {
	t := table{head: []string{"mode", "priority", "workers per process", "urgent latency p50 / p95 / max", "first urgent",
		"all urgent (from the first enqueue)", "backlog released meanwhile", "achieved (/s)", "max in any 1 s", "fairness",
		"Jain's index (backlog keys)", "urgent key's share of fair", "delivered"}, align: "llrrrrrrrlrrl"}
	for _, x := range rows {
		setting := "– (FIFO)"
		if x.Priority != "" {
			setting = "`priority: " + x.Priority + "`"
		}
		del := fmt.Sprintf("%s (urgent %d/%d)", inum(int64(x.Delivered)), x.UrgentDone, x.Urgent)
		if x.Duplicates > 0 {
			del += fmt.Sprintf(" (+%d duplicates)", x.Duplicates)
		}
		if x.Error != "" {
			del += " (" + x.Error + ")"
		}
		lat, first, all := "–", "–", "–"
		if x.UrgentDone > 0 {
			lat = fmt.Sprintf("%s / %s / %s s", num(x.LatP50S, 3), num(x.LatP95S, 3), num(x.LatMaxS, 3))
			first, all = num(x.FirstS, 3)+" s", num(x.AllS, 3)+" s"
		}
		fairness, jain, share := "–", "–", "–"
		if x.Fairness != "" {
			fairness = "`" + x.Fairness + "`"
		}
		if x.Jain > 0 {
			jain, share = num(x.Jain, 4), num(x.UrgentKeyShare, 2)
		}
		t.add(x.Mode, setting, fmt.Sprint(x.Workers), lat, first, all, fmt.Sprint(x.Meanwhile),
			num(x.Achieved, 1), fmt.Sprintf("%d (limit %d)", x.MaxIn1s, x.Rate+1), fairness, jain, share, del)
	}
	return t.String()
}
