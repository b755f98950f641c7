package queue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A deadline the task could never meet (already passed, or before the
// time it may first run) is refused at enqueue with ErrInvalidTask and a
// message naming the field, instead of being archived later.
func TestValidateImpossibleDeadlines(t *testing.T) {
	t.Parallel()
	p := NewProducer(redis.NewClient(&redis.Options{Addr: "unused.invalid:0"}), ProducerConfig{})
	defer p.Close()
	now := time.Now()
	for i, c := range []struct {
		task Task
		msg  string // "" means valid; else a part of the message
	}{
		{Task{Deadline: time.Unix(0, 0)}, "deadline 1970-01-01T00:00:00Z has already passed"},
		{Task{Deadline: now.Add(-time.Minute)}, "has already passed"},
		{Task{ProcessAt: now.Add(time.Hour), Deadline: now.Add(30 * time.Minute)}, "is before the task's process-at time"},
		{Task{ProcessAt: now.Add(time.Hour), TTL: 10 * time.Minute}, "ttl 10m0s (a deadline of"},
		{Task{ProcessAt: now.Add(-time.Hour), Deadline: now.Add(-time.Minute)}, "has already passed"},
		{Task{Deadline: now.Add(time.Minute)}, ""},
		{Task{ProcessAt: now.Add(time.Hour), Deadline: now.Add(2 * time.Hour)}, ""},
		{Task{ProcessAt: now.Add(time.Minute), TTL: time.Hour}, ""},
		{Task{TTL: time.Second}, ""},
		{Task{}, ""},
	} {
		c.task.Downstream = "api"
		err := p.Validate(c.task)
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("step %d: Validate = %v, want nil", i, err)
		case c.msg != "" && (!errors.Is(err, ErrInvalidTask) || !strings.Contains(err.Error(), c.msg)):
			t.Errorf("step %d: Validate = %v, want ErrInvalidTask containing %q", i, err, c.msg)
		}
	}
}
