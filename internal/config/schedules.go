package config

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/shaper-io/shaper/internal/cronspec"
	"github.com/shaper-io/shaper/internal/keys"
	"github.com/shaper-io/shaper/internal/priority"
	"github.com/shaper-io/shaper/internal/sizing"
)

// RateChange sets the downstream's rate each time Cron fires: the rate in
// force is that of the change that fired last. Business hours at 50/s and
// nights at 500/s are two changes: {cron: "0 8 * * 1-5", rate: 50/s} and
// {cron: "0 20 * * 1-5", rate: 500/s}.
type RateChange struct {
	// Cron is a cron expression: five fields, or six with seconds first;
	// or a descriptor such as @daily.
	Cron string `yaml:"cron"`
	Rate Rate   `yaml:"rate"`
}

// Adaptive is the AIMD rate: it decreases by Decrease on 429/503/timeouts
// and increases by Step per calm Interval, between Floor and Ceiling.
type Adaptive struct {
	// Floor is required. Ceiling defaults to the downstream's rate and is
	// never exceeded.
	Floor   Rate `yaml:"floor"`
	Ceiling Rate `yaml:"ceiling,omitempty"`
	// Decrease multiplies the rate on a throttling answer; default 0.75.
	Decrease float64 `yaml:"decrease,omitempty"`
	// Step is added per Interval of successes; default ceiling/20.
	Step Rate `yaml:"step,omitempty"`
	// Interval spaces changes; default 1s.
	Interval Duration `yaml:"interval,omitempty"`
}

// CronJob enqueues a task on a schedule, through the downstream's
// admission policy; exactly one process enqueues each tick however many
// run the same config.
type CronJob struct {
	// Name is unique, 1-64 of A-Z a-z 0-9 _ . -
	Name string `yaml:"name"`
	// Schedule: a cron expression (seconds optional) or a descriptor such
	// as "@every 10s" or "@daily".
	Schedule string `yaml:"schedule"`
	// Timezone (IANA name) the schedule is read in; default UTC.
	Timezone   string `yaml:"timezone,omitempty"`
	Downstream string `yaml:"downstream"`
	// Type is the task type; default "shaper:cron".
	Type string `yaml:"type,omitempty"`
	// Payload is any YAML value, sent as JSON.
	Payload any    `yaml:"payload,omitempty"`
	Key     string `yaml:"key,omitempty"`
	Cost    int64  `yaml:"cost,omitempty"`
	// Priority of the job's tasks, 1-5 (0: the downstream's default); a
	// value other than 3 needs the downstream's priority setting.
	Priority int `yaml:"priority,omitempty"`
}

// PayloadJSON is the payload as JSON ("null" when none).
func (j CronJob) PayloadJSON() ([]byte, error) { return json.Marshal(j.Payload) }

// Location is the job's time zone (UTC by default).
func (j CronJob) Location() (*time.Location, error) { return loadLocation(j.Timezone) }

// Location is the time zone of the downstream's schedule.
func (d Downstream) Location() (*time.Location, error) { return loadLocation(d.Timezone) }

func loadLocation(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	return time.LoadLocation(name)
}

func (d *Downstream) validateSchedule(p string) *Error {
	if d.Timezone != "" {
		if _, err := time.LoadLocation(d.Timezone); err != nil {
			return errf(p+".timezone", "unknown time zone %s", q(d.Timezone))
		}
	}
	loc, _ := d.Location()
	var zoned []cron.Schedule // the changes in the schedule's time zone
	for i, c := range d.Schedule {
		cp := fmt.Sprintf("%s.schedule[%d]", p, i)
		if c.Cron == "" {
			return errf(cp+".cron", "required (e.g. \"0 8 * * 1-5\")")
		}
		if _, e := checkCronSpec(cp+".cron", c.Cron, loc); e != nil {
			return e
		}
		if c.Rate.IsZero() {
			return errf(cp+".rate", "required (e.g. 50/s)")
		}
		if e := checkRate(cp+".rate", c.Rate); e != nil {
			return e
		}
		if e := d.checkRelease(cp+".rate", c.Rate); e != nil {
			return e
		}
		spec := cronspec.InZone(c.Cron, loc)
		s, err := cronspec.Parser.Parse(spec)
		if err != nil {
			return errf(cp, "invalid cron expression %q: %v", spec, err)
		}
		zoned = append(zoned, s)
	}
	if e := d.checkOverlap(p, zoned); e != nil {
		return e
	}
	return d.validateAdaptive(p + ".adaptive")
}

func (d *Downstream) validateAdaptive(ap string) *Error {
	a := d.Adaptive
	if a == nil {
		return nil
	}
	if a.Floor.IsZero() {
		return errf(ap+".floor", "required (e.g. 5/s)")
	}
	if e := checkRate(ap+".floor", a.Floor); e != nil {
		return e
	}
	if e := d.checkRelease(ap+".floor", a.Floor); e != nil {
		return e
	}
	ceiling := d.Limit()
	if !a.Ceiling.IsZero() {
		if e := checkRate(ap+".ceiling", a.Ceiling); e != nil {
			return e
		}
		if e := d.checkRelease(ap+".ceiling", a.Ceiling); e != nil {
			return e
		}
		ceiling = a.Ceiling.Limit()
	}
	if !a.Step.IsZero() {
		if e := checkRate(ap+".step", a.Step); e != nil {
			return e
		}
	}
	if pr := sizing.CheckAdaptive(a.Floor.Limit(), ceiling, a.Step.Limit(), a.Decrease, time.Duration(a.Interval)); pr != nil {
		return errf(ap+"."+pr.Field, "%s", pr.Msg)
	}
	return nil
}

// checkOverlap refuses two rate changes that fire at one instant: the rate
// would be ambiguous then. Within the next year it replays the schedule;
// for pairs of cron expressions it also checks every day of a 400-year
// calendar cycle, so a collision years away (29 February on a Monday) is
// found too.
func (d *Downstream) checkOverlap(p string, rs []cron.Schedule) *Error {
	fail := func(i, j int, at string) *Error {
		return errf(fmt.Sprintf("%s.schedule[%d].cron", p, j), "%s fires at the same time as schedule[%d] (%s), at %s: the rate would be ambiguous",
			q(d.Schedule[j].Cron), i, q(d.Schedule[i].Cron), at)
	}
	if i, j, at, found := cronspec.Overlap(rs, time.Now()); found {
		return fail(i, j, at.UTC().Format(time.RFC3339))
	}
	for j := range rs {
		b, ok := rs[j].(*cron.SpecSchedule)
		for i := 0; ok && i < j; i++ {
			if a, ok := rs[i].(*cron.SpecSchedule); ok {
				if at, found := specOverlap(a, b); found {
					return fail(i, j, at.Format("2006-01-02 15:04:05")+" "+cmp.Or(d.Timezone, "UTC"))
				}
			}
		}
	}
	return nil
}

func (c *Config) validateCron() *Error {
	names := map[string]string{}
	for i, j := range c.Cron {
		p := fmt.Sprintf("cron[%d]", i)
		if msg := keys.CheckName(j.Name); msg != "" {
			return errf(p+".name", "%s", msg)
		}
		if first, dup := names[j.Name]; dup {
			return errf(p+".name", "duplicate name %s (first at %s)", q(j.Name), first)
		}
		names[j.Name] = p
		if j.Schedule == "" {
			return errf(p+".schedule", "required (e.g. \"0 2 * * *\" or \"@every 10s\")")
		}
		if j.Timezone != "" {
			if _, err := time.LoadLocation(j.Timezone); err != nil {
				return errf(p+".timezone", "unknown time zone %s", q(j.Timezone))
			}
		}
		loc, _ := j.Location()
		if _, e := checkCronSpec(p+".schedule", j.Schedule, loc); e != nil {
			return e
		}
		if j.Downstream == "" {
			return errf(p+".downstream", "required")
		}
		if _, ok := c.Downstream(j.Downstream); !ok {
			return errf(p+".downstream", "unknown downstream %s", q(j.Downstream))
		}
		if j.Cost < 1 {
			return errf(p+".cost", "must be at least 1, got %d", j.Cost)
		}
		if err := priority.Validate(j.Priority); err != nil {
			return errf(p+".priority", "%v", err)
		}
		if d, _ := c.Downstream(j.Downstream); j.Priority != 0 && j.Priority != priority.Default && d.Priority == nil {
			return errf(p+".priority", "%d needs downstream %s to serve priorities (set priority: {} on it)", j.Priority, q(j.Downstream))
		}
		if _, err := j.PayloadJSON(); err != nil {
			return errf(p+".payload", "cannot be sent as JSON: %v", err)
		}
	}
	return nil
}
