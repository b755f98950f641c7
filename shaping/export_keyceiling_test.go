package shaping

// KeyCeilingCounts are downstream ds's key ceiling's script calls, keys
// claimed and candidates refused, in this dispatcher.
func (d *Dispatcher) KeyCeilingCounts(ds string) (calls, claims, failed int64) {
	r, _ := d.runner(ds)
	if r.lane.kc == nil {
		return 0, 0, 0
	}
	c := r.lane.kc
	return c.calls.Load(), c.claims.Load(), c.failed.Load()
}
