package config

import (
	"net"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shaper-io/shaper/internal/cronspec"
)

// Upper bounds on fields whose larger values are mistakes (a unit typed
// wrong), not configurations: each would hold a task, a worker or memory
// for longer or more than anything shaper is for.
const (
	// MaxMaxBody bounds http.max_body; a task payload lives in Redis.
	MaxMaxBody = ByteSize(64 << 20)
	// cronHorizon is how far ahead a schedule must fire at least once.
	cronHorizon = 5 * 365 * 24 * time.Hour
)

// checkCronSpec parses a cron expression or descriptor and refuses the
// ones robfig/cron accepts but that cannot mean what they say: "@every"
// under a second or not a whole number of seconds (robfig runs them every
// second), and an expression that never fires (0 0 30 2 *).
func checkCronSpec(path, spec string, loc *time.Location) (cron.Schedule, *Error) {
	s, err := cronspec.Parser.Parse(spec)
	if err != nil {
		return nil, errf(path, "invalid cron expression %s: %v", q(spec), err)
	}
	if every, ok := strings.CutPrefix(strings.TrimSpace(spec), "@every "); ok {
		d, _ := time.ParseDuration(strings.TrimSpace(every)) // parsed by the Parser already
		switch {
		case d < time.Second:
			return nil, errf(path, "%s: the interval must be at least 1s, got %s", q(spec), d)
		case d%time.Second != 0:
			return nil, errf(path, "%s: the interval must be whole seconds, got %s", q(spec), d)
		}
		return s, nil
	}
	if loc == nil {
		loc = time.UTC
	}
	now := time.Now().In(loc)
	if next := s.Next(now); next.IsZero() || next.Sub(now) > cronHorizon {
		return nil, errf(path, "%s never fires (no time matches it in the next 5 years)", q(spec))
	}
	return s, nil
}

// specOverlap reports a minute-and-second instant, in the schedules' own
// time zone, at which a and b both fire, looking at every day of a full
// 400-year Gregorian cycle, so that rare collisions (29 February on a
// Monday) are found too.
func specOverlap(a, b *cron.SpecSchedule) (time.Time, bool) {
	const star = 1 << 63 // robfig's starBit
	sec, mins, hour, month := a.Second&b.Second&^star, a.Minute&b.Minute&^star, a.Hour&b.Hour&^star, a.Month&b.Month&^star
	if sec == 0 || mins == 0 || hour == 0 || month == 0 {
		return time.Time{}, false
	}
	first := func(bits uint64) int {
		for i := 0; i < 64; i++ {
			if bits&(1<<i) != 0 {
				return i
			}
		}
		return 0
	}
	start := time.Date(time.Now().Year(), 1, 1, 0, 0, 0, 0, time.UTC)
	for d := start; d.Year() < start.Year()+400; d = d.AddDate(0, 0, 1) {
		if month&(1<<uint(d.Month())) == 0 || !dayMatches(a, d) || !dayMatches(b, d) {
			continue
		}
		return time.Date(d.Year(), d.Month(), d.Day(), first(hour), first(mins), first(sec), 0, time.UTC), true
	}
	return time.Time{}, false
}

// dayMatches is robfig/cron's day rule: when either day field is "*", both
// must match; otherwise either may.
func dayMatches(s *cron.SpecSchedule, d time.Time) bool {
	const star = 1 << 63
	dom := s.Dom&(1<<uint(d.Day())) != 0
	dow := s.Dow&(1<<uint(d.Weekday())) != 0
	if s.Dom&star != 0 || s.Dow&star != 0 {
		return dom && dow
	}
	return dom || dow
}

// checkExposure refuses an HTTP server reachable beyond this host without
// a token, unless the file says that is intended; and tenant keys on
// /metrics (metrics_keys) served there without a token, intended or not.
func (h *HTTP) checkExposure() *Error {
	if !h.Enabled() || h.TokenEnv != "" {
		return nil
	}
	host, _, _ := net.SplitHostPort(h.Listen)
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if h.MetricsKeys {
		return errf("http.metrics_keys", "true would serve tenant keys on /metrics to anyone who reaches %s: set token_env (Prometheus then scrapes with the bearer token) or listen on 127.0.0.1", q(h.Listen))
	}
	if h.AllowUnauthenticated {
		return nil
	}
	return errf("http.listen", "%s is reachable beyond this host but http.token_env is not set: anyone could enqueue tasks and pause downstreams (set token_env, listen on 127.0.0.1, or set allow_unauthenticated: true)", q(h.Listen))
}
