package shaping

import (
	"time"

	"github.com/shaper-io/shaper/internal/bucket"
	"github.com/shaper-io/shaper/internal/quota"
)

// Quota is a budget of Limit units per Per that a downstream's releases
// never pass, beside its rate (internal/quota, where the config file's
// checks share its rule).
type Quota = quota.Quota

// Quota bounds and defaults (internal/quota).
const (
	// MaxQuotaPeriod is the longest Quota.Per.
	MaxQuotaPeriod = quota.MaxPeriod
	// MinQuotaPeriod is the shortest Quota.Per.
	MinQuotaPeriod = quota.MinPeriod
	// QuotaSubWindows is how many sub-windows a sliding quota counts in.
	QuotaSubWindows = quota.SubWindows
	// DefaultQuotaMargin is Quota.Margin's default.
	DefaultQuotaMargin = quota.DefaultMargin
)

// QuotaUse is one quota's state as a reservation saw it.
type QuotaUse struct {
	Quota Quota
	// Used is the units that count against the quota now (slots
	// reserved ahead included), at most its Limit.
	Used int64
	// Reset is when Used next falls: the aligned window's end, or when the
	// oldest counted units stop counting; zero when nothing counts.
	Reset time.Time
}

// minQuota is the smallest quota limit (0 without quotas).
func minQuota(qs []Quota) int64 {
	m := int64(0)
	for _, q := range qs {
		if m == 0 || q.Limit < m {
			m = q.Limit
		}
	}
	return m
}

const maxIntervalUS = bucket.MaxIntervalUS
