// Package httpapi is shaper's HTTP enqueue API: POST a task to a
// downstream, get 202 with its id when admission accepts (or defers) it,
// 200 with the id of the waiting task it was collapsed into (a downstream
// with collapse), 429 with Retry-After and RateLimit headers when
// admission rejects it, 422 when its deadline cannot be met (on_late:
// reject).
// docs/http-api.md is the reference for callers; this comment is for
// maintainers.
//
// Routes (all behind the server's bearer token when one is configured):
//
//	POST /v1/downstreams/{downstream}/tasks   a task object; the path names the downstream
//	POST /v1/tasks                            a task object that names its downstream
//	GET  /v1/downstreams/{downstream}/tasks/{id}   the task's state
//
// The task object is the one the enqueue CLI reads from JSON Lines
// (package taskspec), so a line of such a file can be POSTed as it is.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/shaper-io/shaper/internal/envelope"
	"github.com/shaper-io/shaper/internal/explain"
	"github.com/shaper-io/shaper/internal/server"
	"github.com/shaper-io/shaper/internal/taskspec"
	"github.com/shaper-io/shaper/limiters"
	"github.com/shaper-io/shaper/queue"
)

// DefaultMaxBody is the body limit when Config.MaxBody is zero.
const DefaultMaxBody = 1 << 20

// DefaultTimeout bounds one enqueue when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Config configures the API.
type Config struct {
	// Producer enqueues, running each downstream's admission; required.
	Producer *queue.Producer
	// Inspector serves GET on a task; nil leaves that route out.
	Inspector *queue.Inspector
	// MaxBody is the largest request body in bytes; 0 means
	// DefaultMaxBody. A larger body gets 413.
	MaxBody int64
	// Timeout bounds the admission and enqueue of one request (Redis
	// calls included, with their retries); past it the answer is 503.
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for "in" and for response times; nil means
	// time.Now.
	Now func() time.Time
	// Downstreams are the configured downstreams, which GET and DELETE on
	// /v1/tasks/{id} look in for the task.
	Downstreams []string
	// Explain, when set, says why a task is where it is for GET on a task
	// (its "explain"; internal/explain); an error leaves it out.
	Explain func(ctx context.Context, downstream, id string) (explain.Explanation, error)
}

// API serves the enqueue routes. Safe for concurrent use.
type API struct {
	cfg Config
}

// New returns the API for cfg.
func New(cfg Config) *API {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &API{cfg: cfg}
}

// Mounter is where the routes go: *server.Server, whose Protected checks
// the bearer token.
type Mounter interface {
	Protected(pattern string, h http.Handler)
}

var _ Mounter = (*server.Server)(nil)

// Mount adds the API's routes to m.
func (a *API) Mount(m Mounter) {
	m.Protected("POST /v1/downstreams/{downstream}/tasks", http.HandlerFunc(a.enqueuePath))
	m.Protected("POST /v1/tasks", http.HandlerFunc(a.enqueueBody))
	if a.cfg.Inspector != nil {
		m.Protected("GET /v1/downstreams/{downstream}/tasks/{id}", http.HandlerFunc(a.getTask))
		m.Protected("DELETE /v1/downstreams/{downstream}/tasks/{id}", http.HandlerFunc(a.cancelTask))
		m.Protected("GET /v1/tasks/{id}", a.anyDownstream(a.getTask))
		m.Protected("DELETE /v1/tasks/{id}", a.anyDownstream(a.cancelTask))
	}
}

// TaskPath is the URL path of a task's resource (the Location of a 202).
func TaskPath(downstream, id string) string {
	return "/v1/downstreams/" + url.PathEscape(downstream) + "/tasks/" + url.PathEscape(id)
}

// Accepted is the body of a 202.
type Accepted struct {
	ID         string `json:"id"`
	Downstream string `json:"downstream"`
	Queue      string `json:"queue"`
	// State is asynq's state of the task: "pending" (runs as soon as its
	// downstream's rate allows, or, with FairTurn, its key's turn in fair
	// order) or "scheduled" (runs at ProcessAt: deferred, or "at"/"in"
	// was set).
	State     string    `json:"state"`
	Deferred  bool      `json:"deferred"`
	ProcessAt time.Time `json:"process_at"`
	// Priority is the priority the task waits at, 1 (taken first) to 5
	// (taken last): its own, else its downstream's default (queue
	// Receipt.Priority).
	Priority int `json:"priority"`
	// RetryAfter is, for a deferred task, the admission's Retry-After in
	// seconds (the task runs no earlier than that).
	RetryAfter float64 `json:"retry_after,omitempty"`
	// FairTurn is true when the task waits in fair order for its key's
	// turn (queue Receipt.FairWaiting); ExpectedStart says when it is
	// expected to go.
	FairTurn bool `json:"fair_turn,omitempty"`
	// ExpectedStart estimates when the task will be released (queue
	// Receipt.ExpectedStart); absent when there is no estimate.
	ExpectedStart *time.Time `json:"expected_start,omitempty"`
	Location      string     `json:"location"`
	Admission     *Admission `json:"admission,omitempty"`
}

// Collapsed is the body of a 200 to a POSTed task: a task with its
// collapse_key still waited, and this one was collapsed into it (queue
// Outcome Collapsed). Nothing new was enqueued.
type Collapsed struct {
	// ID and CollapsedInto are the waiting task's id.
	ID            string `json:"id"`
	CollapsedInto string `json:"collapsed_into"`
	Downstream    string `json:"downstream"`
	Queue         string `json:"queue"`
	// State is the waiting task's asynq state as the answer is written:
	// pending, scheduled or retry, or active and later when it was taken
	// meanwhile; absent when it could not be read (no Inspector, the task
	// already finished and was deleted, or Redis failed).
	State    string `json:"state,omitempty"`
	Location string `json:"location"`
}

// Late is the body of a 422: the task's predicted start is past its
// deadline and its downstream has on_late: reject.
type Late struct {
	Error         string    `json:"error"`
	Downstream    string    `json:"downstream"`
	Deadline      time.Time `json:"deadline"`
	ExpectedStart time.Time `json:"expected_start"`
}

// Admission describes the admission decision in a response body.
type Admission struct {
	Limiter   string `json:"limiter"`
	Algorithm string `json:"algorithm"`
	Limit     string `json:"limit"`
	Remaining int64  `json:"remaining"`
	// FailedOpen: Redis failed and the policy let the task in without a
	// decision.
	FailedOpen bool `json:"failed_open,omitempty"`
}

// Rejected is the body of a 429.
type Rejected struct {
	Error      string `json:"error"`
	Downstream string `json:"downstream"`
	Limiter    string `json:"limiter"`
	Algorithm  string `json:"algorithm"`
	Limit      string `json:"limit"`
	Remaining  int64  `json:"remaining"`
	// RetryAfter is the exact Retry-After in seconds (the header rounds up
	// to whole seconds).
	RetryAfter float64 `json:"retry_after"`
}

func (a *API) enqueuePath(w http.ResponseWriter, r *http.Request) {
	a.enqueue(w, r, r.PathValue("downstream"))
}

func (a *API) enqueueBody(w http.ResponseWriter, r *http.Request) {
	a.enqueue(w, r, "")
}

func (a *API) enqueue(w http.ResponseWriter, r *http.Request, pathDS string) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	spec, err := taskspec.Parse(body)
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, taskspec.Reason(err))
		return
	}
	if pathDS != "" {
		if spec.Downstream != nil && *spec.Downstream != pathDS {
			server.WriteError(w, http.StatusBadRequest, fmt.Sprintf("downstream: the body says %q but the path says %q (leave it out of the body)", *spec.Downstream, pathDS))
			return
		}
		spec.Downstream = &pathDS
	}
	task, err := spec.Task(a.cfg.Now())
	if err != nil {
		server.WriteError(w, http.StatusBadRequest, taskspec.Reason(err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Timeout)
	defer cancel()
	rec, err := a.cfg.Producer.Enqueue(ctx, task)
	switch {
	case rec.Outcome.Enqueued():
		a.accepted(w, rec, rec.Admission.FailedOpen)
	case rec.Outcome == queue.Collapsed:
		a.collapsed(w, rec)
	case rec.Outcome == queue.Rejected && !errors.Is(err, limiters.ErrFailedClosed):
		res := rec.Admission
		SetRateLimitHeaders(w.Header(), res)
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(res.RetryAfter), 10))
		server.WriteJSON(w, http.StatusTooManyRequests, Rejected{
			Error:      fmt.Sprintf("rejected by admission (%s %q): retry after %s", res.Algorithm, res.Name, res.RetryAfter.Round(time.Millisecond)),
			Downstream: task.Downstream, Limiter: res.Name, Algorithm: string(res.Algorithm),
			Limit: res.Limit.String(), Remaining: max(res.Remaining, 0),
			RetryAfter: res.RetryAfter.Seconds(),
		})
	case rec.Outcome == queue.Late:
		a.late(w, err)
	case rec.Outcome == queue.Duplicate:
		server.WriteJSON(w, http.StatusConflict, map[string]string{
			"error": fmt.Sprintf("a task with unique key %q already exists", task.UniqueKey),
			"id":    task.UniqueKey, "location": TaskPath(task.Downstream, task.UniqueKey)})
	case errors.Is(err, queue.ErrUnknownDownstream):
		status := http.StatusBadRequest
		if pathDS != "" {
			status = http.StatusNotFound
		}
		server.WriteError(w, status, fmt.Sprintf("unknown downstream %q", task.Downstream))
	case errors.Is(err, queue.ErrInvalidTask), errors.Is(err, limiters.ErrInvalidCost):
		server.WriteError(w, http.StatusBadRequest, taskspec.Reason(err))
	case errors.Is(err, limiters.ErrCostExceedsCapacity):
		server.WriteError(w, http.StatusBadRequest, costReason(err))
	case r.Context().Err() != nil:
		// The client went away; nobody reads this. A charge the admission
		// made has been refunded by the Producer.
		server.WriteError(w, http.StatusServiceUnavailable, "request cancelled")
	default:
		// Redis is down or slow: admission failed closed, or the enqueue
		// itself failed. The task is not in the queue; trying again later
		// is right.
		a.cfg.Logger.Warn("enqueue failed", "downstream", task.Downstream, "err", err)
		msg := "queue unavailable: the task was not enqueued (redis error)"
		if errors.Is(err, limiters.ErrFailedClosed) {
			msg = "admission unavailable: redis failed and the policy is fail_closed; the task was not enqueued"
		}
		w.Header().Set("Retry-After", "1")
		server.WriteError(w, http.StatusServiceUnavailable, msg)
	}
}

// late answers 422 for a task refused because it would start after its
// deadline: retrying cannot help (later, it starts later still).
func (a *API) late(w http.ResponseWriter, err error) {
	var le *queue.LateError
	if !errors.As(err, &le) {
		server.WriteError(w, http.StatusUnprocessableEntity, taskspec.Reason(err))
		return
	}
	server.WriteJSON(w, http.StatusUnprocessableEntity, Late{
		Error: fmt.Sprintf("refused: predicted start %s is %s past the deadline %s (on_late: reject)",
			le.ExpectedStart.UTC().Format(time.RFC3339Nano), le.ExpectedStart.Sub(le.Deadline).Round(time.Millisecond),
			le.Deadline.UTC().Format(time.RFC3339Nano)),
		Downstream: le.Downstream, Deadline: le.Deadline, ExpectedStart: le.ExpectedStart})
}

func costReason(err error) string {
	return taskspec.Reason(err) + " (no Retry-After would let it through)"
}

// readBody reads at most MaxBody bytes; past that it answers 413.
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > a.cfg.MaxBody {
		a.tooLarge(w, r.ContentLength)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		a.tooLarge(w, -1)
		return nil, false
	case err != nil:
		server.WriteError(w, http.StatusBadRequest, "reading the body: "+taskspec.OneLine(err.Error()))
		return nil, false
	}
	return body, true
}

func (a *API) tooLarge(w http.ResponseWriter, n int64) {
	// The rest of an oversized body is not read; close the connection
	// rather than drain it.
	w.Header().Set("Connection", "close")
	msg := fmt.Sprintf("the body is larger than the limit of %d bytes (http.max_body)", a.cfg.MaxBody)
	if n > 0 {
		msg = fmt.Sprintf("the body is %d bytes, larger than the limit of %d bytes (http.max_body)", n, a.cfg.MaxBody)
	}
	server.WriteError(w, http.StatusRequestEntityTooLarge, msg)
}

func (a *API) accepted(w http.ResponseWriter, rec queue.Receipt, failedOpen bool) {
	now := a.cfg.Now()
	body := Accepted{ID: rec.ID, Downstream: rec.Downstream, Queue: rec.Queue, State: "pending",
		Deferred: rec.Deferred, ProcessAt: rec.ProcessAt, Priority: rec.Priority, Location: TaskPath(rec.Downstream, rec.ID)}
	if rec.ProcessAt.After(now) {
		body.State = "scheduled"
	}
	body.FairTurn = rec.FairWaiting
	if rec.Deferred {
		body.RetryAfter = rec.Admission.RetryAfter.Seconds()
	}
	if !rec.ExpectedStart.IsZero() {
		es := rec.ExpectedStart
		body.ExpectedStart = &es
	}
	if res := rec.Admission; res.Name != "" {
		body.Admission = &Admission{Limiter: res.Name, Algorithm: string(res.Algorithm), Limit: res.Limit.String(),
			Remaining: max(res.Remaining, 0), FailedOpen: failedOpen}
		if !failedOpen {
			SetRateLimitHeaders(w.Header(), res)
		}
	}
	w.Header().Set("Location", body.Location)
	server.WriteJSON(w, http.StatusAccepted, body)
}

// collapsed answers 200 for a task collapsed into a waiting task: nothing
// new was enqueued, and Location names the waiting task, as a 202's names
// the new one.
func (a *API) collapsed(w http.ResponseWriter, rec queue.Receipt) {
	body := Collapsed{ID: rec.ID, CollapsedInto: rec.CollapsedInto, Downstream: rec.Downstream, Queue: rec.Queue,
		Location: TaskPath(rec.Downstream, rec.ID)}
	if a.cfg.Inspector != nil {
		info, err := a.cfg.Inspector.Asynq().GetTaskInfo(rec.Queue, rec.ID)
		switch {
		case err == nil:
			body.State = info.State.String()
		case !errors.Is(err, asynq.ErrTaskNotFound):
			a.cfg.Logger.Warn("collapsed task lookup failed", "downstream", rec.Downstream, "id", rec.ID, "err", err)
		}
	}
	w.Header().Set("Location", body.Location)
	server.WriteJSON(w, http.StatusOK, body)
}

// Policy is the quota a limiter advertises in RateLimit-Policy: Quota
// units per Window seconds.
//
// For the window algorithms that is the limit per window. For the token
// and leaky buckets it is the capacity and the time the bucket takes to
// refill (or drain) completely at its rate, so Quota/Window is the
// sustained rate and Quota the burst.
func Policy(l limiters.Limit, alg limiters.Algorithm) (quota, window int64) {
	switch alg {
	case limiters.FixedWindow, limiters.SlidingLog, limiters.SlidingCounter:
		quota = l.Rate
		window = ceilSeconds(l.Period)
	default:
		quota = l.Capacity()
		window = ceilSeconds(l.Interval(quota))
	}
	return quota, max(window, 1)
}

// SetRateLimitHeaders sets the RateLimit header fields for res, the
// decision of one limiter (the one that rejected, or the one with the
// least room left):
//
//	RateLimit-Policy: "<name>";q=<quota>;w=<window>   (IETF draft-ietf-httpapi-ratelimit-headers)
//	RateLimit: "<name>";r=<remaining>;t=<seconds>
//	X-RateLimit-Limit: <quota>
//	X-RateLimit-Remaining: <remaining>
//	X-RateLimit-Reset: <seconds>
//
// t (and X-RateLimit-Reset) is, for a rejection, the Retry-After; for an
// admitted task, the time until the limiter is back to idle (window over,
// bucket full). All are whole seconds, rounded up.
func SetRateLimitHeaders(h http.Header, res limiters.Result) {
	if res.Name == "" || res.Limit.IsZero() {
		return
	}
	q, win := Policy(res.Limit, res.Algorithm)
	remaining := max(res.Remaining, 0)
	var t int64
	if res.Allowed {
		t = ceilSeconds(res.ResetAfter)
	} else {
		t = max(ceilSeconds(res.RetryAfter), 1)
	}
	name := sfString(res.Name)
	h.Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, q, win))
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", name, remaining, t))
	h.Set("X-RateLimit-Limit", strconv.FormatInt(q, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(t, 10))
}

// sfString writes s as a Structured Field String (RFC 8941): printable
// ASCII in quotes, with " and \ escaped; anything else becomes '?'.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}

// ceilSeconds is d in whole seconds, rounded up: a client that waits that
// long is never early.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// TaskState is the body of GET on a task.
type TaskState struct {
	ID         string `json:"id"`
	Downstream string `json:"downstream"`
	Queue      string `json:"queue"`
	Type       string `json:"type"`
	// State is asynq's: pending, active, scheduled, retry, archived,
	// completed (or aggregating).
	State         string     `json:"state"`
	NextProcessAt *time.Time `json:"next_process_at,omitempty"`
	Cost          int64      `json:"cost"`
	Key           string     `json:"key,omitempty"`
	Retried       int        `json:"retried"`
	MaxRetry      int        `json:"max_retry"`
	LastError     string     `json:"last_error,omitempty"`
	LastFailedAt  *time.Time `json:"last_failed_at,omitempty"`
	CompletedAt   *time.Time `json:"completed_at,omitempty"`
	PayloadBytes  int        `json:"payload_bytes"`
	// Explain says why the task is where it is: its reason and, for a task
	// that waits in the queue, what holds its downstream now.
	Explain *explain.Explanation `json:"explain,omitempty"`
}

func (a *API) getTask(w http.ResponseWriter, r *http.Request) {
	ds, id := r.PathValue("downstream"), r.PathValue("id")
	info, err := a.cfg.Inspector.Asynq().GetTaskInfo(a.cfg.Producer.Queue(ds), id)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		server.WriteError(w, http.StatusNotFound, fmt.Sprintf("no task %q in downstream %q", id, ds))
		return
	case err != nil:
		a.cfg.Logger.Warn("task lookup failed", "downstream", ds, "id", id, "err", err)
		w.Header().Set("Retry-After", "1")
		server.WriteError(w, http.StatusServiceUnavailable, "queue unavailable (redis error)")
		return
	}
	meta, _ := envelope.Decode(info.Headers)
	st := TaskState{ID: info.ID, Downstream: ds, Queue: info.Queue, Type: info.Type, State: info.State.String(),
		Cost: meta.Cost, Key: meta.Key, Retried: info.Retried, MaxRetry: meta.MaxRetry,
		LastError: info.LastErr, PayloadBytes: len(info.Payload)}
	if meta.MaxRetry < 0 {
		st.MaxRetry = info.MaxRetry
	}
	st.NextProcessAt = timePtr(info.NextProcessAt)
	st.LastFailedAt = timePtr(info.LastFailedAt)
	st.CompletedAt = timePtr(info.CompletedAt)
	if a.cfg.Explain != nil {
		if e, err := a.cfg.Explain(r.Context(), ds, id); err == nil {
			st.Explain = &e
		} else {
			a.cfg.Logger.Debug("task explain failed", "downstream", ds, "id", id, "err", err)
		}
	}
	server.WriteJSON(w, http.StatusOK, st)
}

// anyDownstream serves /v1/tasks/{id} with h, on the downstream that
// holds the task: 404 when none does.
func (a *API) anyDownstream(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		ds, err := a.cfg.Inspector.Find(a.cfg.Downstreams, id)
		switch {
		case errors.Is(err, queue.ErrNoTask):
			server.WriteError(w, http.StatusNotFound, fmt.Sprintf("no task %q in any downstream", id))
		case err != nil:
			a.cfg.Logger.Warn("task lookup failed", "id", id, "err", err)
			w.Header().Set("Retry-After", "1")
			server.WriteError(w, http.StatusServiceUnavailable, "queue unavailable (redis error)")
		default:
			r.SetPathValue("downstream", ds)
			h(w, r)
		}
	})
}

// Cancelled is the body of a DELETE on a task.
type Cancelled struct {
	ID string `json:"id"`
	// State is the state the task was cancelled in (pending, scheduled,
	// retry, archived, completed, active).
	State string `json:"state"`
}

// cancelTask cancels a task (queue.Inspector.Cancel): one that waits is
// deleted (200); an active one is cut by the process that holds it (202:
// removed unsent, or its call's context cancelled if the call had begun).
func (a *API) cancelTask(w http.ResponseWriter, r *http.Request) {
	ds, id := r.PathValue("downstream"), r.PathValue("id")
	st, err := a.cfg.Inspector.Cancel(ds, id)
	switch {
	case errors.Is(err, queue.ErrNoTask):
		server.WriteError(w, http.StatusNotFound, fmt.Sprintf("no task %q in downstream %q", id, ds))
	case err == nil && st == asynq.TaskStateActive:
		server.WriteJSON(w, http.StatusAccepted, Cancelled{ID: id, State: st.String()})
	case err != nil:
		a.cfg.Logger.Warn("task cancel failed", "downstream", ds, "id", id, "err", err)
		w.Header().Set("Retry-After", "1")
		server.WriteError(w, http.StatusServiceUnavailable, "queue unavailable (redis error)")
	default:
		server.WriteJSON(w, http.StatusOK, Cancelled{ID: id, State: st.String()})
	}
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
