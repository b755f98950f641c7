package app

import (
	"fmt"

	"github.com/shaper-io/shaper/internal/config"
	"github.com/shaper-io/shaper/queue"
	"github.com/shaper-io/shaper/shaping"
)

// CronJobs turns the config's cron entries into queue.CronJobs.
func CronJobs(cfg *config.Config) ([]queue.CronJob, error) {
	var out []queue.CronJob
	for i, j := range cfg.Cron {
		loc, err := j.Location()
		if err != nil {
			return nil, fmt.Errorf("config: cron[%d].timezone: %w", i, err)
		}
		s, err := shaping.CronParser.Parse("CRON_TZ=" + loc.String() + " " + j.Schedule)
		if err != nil {
			return nil, fmt.Errorf("config: cron[%d].schedule: %w", i, err)
		}
		payload, err := j.PayloadJSON()
		if err != nil {
			return nil, fmt.Errorf("config: cron[%d].payload: %w", i, err)
		}
		out = append(out, queue.CronJob{Name: j.Name, Schedule: s, Task: queue.Task{
			Downstream: j.Downstream, Type: j.Type, Payload: payload, Key: j.Key, Cost: j.Cost}})
	}
	return out, nil
}
