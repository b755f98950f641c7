package shaping

import "sort"

// FairBacklogged is the keys of fair downstream ds that this dispatcher
// released, over the last minute, while another of their tasks waited:
// the keys its Jain index counts.
func (d *Dispatcher) FairBacklogged(ds string) []string {
	r, _ := d.runner(ds)
	var out []string
	for k, c := range r.fstats.minute(r.d.cfg.Clock.Now()) {
		if c.backlog {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
