package shaping

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// HTTPConfig configures HTTPHandler.
type HTTPConfig struct {
	// URL receives each task's payload as the request body; required.
	URL string
	// Method; "" means POST.
	Method string
	// Headers are added to every request (Content-Type defaults to
	// application/json).
	Headers map[string]string
	// Timeout bounds one request; zero means 10s.
	Timeout time.Duration
	// Client; nil means a client with Timeout.
	Client *http.Client
}

// HTTPHandler forwards each task's payload to a URL:
//   - 2xx: done;
//   - 429 or 503: the downstream is throttling; its Retry-After (seconds or
//     an HTTP date) pushes the bucket back for every worker (a bare 429
//     pauses 1s, or slows the adaptive rate), and the task is retried
//     without consuming an attempt;
//   - other 5xx (a StatusError), timeouts, connection errors: retried
//     with backoff (a circuit breaker counts them: see Breaker);
//   - other 4xx: archived at once, with the status and the start of the
//     response body in the error.
//
// Each request carries Idempotency-Key: <task id>, so a downstream can drop
// the rare duplicate of at-least-once delivery.
func HTTPHandler(cfg HTTPConfig) HandlerFunc {
	method := cfg.Method
	if method == "" {
		method = http.MethodPost
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	client := cfg.Client
	if client == nil {
		// Keep a warm connection per worker: the default of 2 idle
		// connections per host makes most releases dial anew, which adds
		// jitter between a slot and the request's arrival.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
		client = &http.Client{Timeout: cfg.Timeout, Transport: tr}
	}
	return func(ctx context.Context, t *Task) error {
		ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, cfg.URL, bytes.NewReader(t.Payload))
		if err != nil {
			return Permanent(fmt.Errorf("http: build request: %w", err))
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range cfg.Headers {
			req.Header.Set(k, v)
		}
		req.Header.Set("Idempotency-Key", t.ID)
		req.Header.Set("X-Shaper-Task-Id", t.ID)
		req.Header.Set("X-Shaper-Downstream", t.Downstream)
		req.Header.Set("X-Shaper-Slot", strconv.FormatInt(t.Slot.UnixMicro(), 10))
		req.Header.Set("X-Shaper-Process", processID)
		req.Header.Set("X-Shaper-Released", strconv.FormatInt(time.Now().UnixMicro(), 10))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("http: %s %s: %w", method, cfg.URL, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
		switch c := resp.StatusCode; {
		case c >= 200 && c < 300:
			return nil
		case c == http.StatusTooManyRequests || c == http.StatusServiceUnavailable:
			// Without a readable Retry-After, After stays 0 and the
			// dispatcher picks the pause (see ThrottledError).
			d, _ := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
			return Throttled(d, fmt.Errorf("http: %s", resp.Status))
		case c >= 500:
			return &StatusError{Code: c, Err: fmt.Errorf("http: %s: %s", resp.Status, snippet(body))}
		default:
			return Permanent(fmt.Errorf("http: %s: %s", resp.Status, snippet(body)))
		}
	}
}

// processID names this process in requests (host/pid), so a downstream
// (or a test) can tell which shaper released a task.
var processID = func() string {
	h, _ := os.Hostname()
	return h + "/" + strconv.Itoa(os.Getpid())
}()

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "(empty body)"
	}
	return strconv.Quote(s)
}

// ParseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date.
// Values are capped at an hour, so a broken downstream cannot park the
// bucket for days.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s != s {
			return 0, false
		}
		d = time.Duration(min(s, 3600) * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = max(t.Sub(now), 0)
	} else {
		return 0, false
	}
	return min(d, time.Hour), true
}

// LogHandler returns a handler that logs each release through logf (for
// the quick start and dry runs).
func LogHandler(logf func(format string, args ...any)) HandlerFunc {
	return func(ctx context.Context, t *Task) error {
		p := string(t.Payload)
		if len(p) > 64 {
			p = fmt.Sprintf("%d bytes", len(p))
		}
		logf("released task %s to %s (key %q, cost %d, slot %s): %s",
			t.ID, t.Downstream, t.Key, t.Cost, t.Slot.Format("15:04:05.000"), p)
		return nil
	}
}
