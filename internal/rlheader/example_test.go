package rlheader_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/shaper-io/shaper/internal/rlheader"
)

func ExampleParse() {
	h := http.Header{}
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", "1800000030")
	h.Set("Retry-After", "20")
	l, _ := rlheader.Binding(rlheader.Parse(h, time.Unix(1_800_000_000, 0)))
	fmt.Printf("%d left for %v (%s)\n", l.Remaining, l.Reset, l.Header)
	// Output: 0 left for 30s (X-RateLimit-Remaining: 0; X-RateLimit-Reset: 1800000030)
}

func ExampleProfile() {
	m, _ := rlheader.Profile("shopify")
	h := http.Header{}
	h.Set("X-Shopify-Shop-Api-Call-Limit", "32/40")
	for _, l := range rlheader.ParseWith(h, time.Unix(1_800_000_000, 0), m) {
		fmt.Printf("%s: %d of %d left for %v\n", l.Source, l.Remaining, l.Limit, l.Reset)
	}
	// Output: shopify: 8 of 40 left for 16s
}

func ExampleMapping_Validate() {
	m := rlheader.Mapping{Remaining: "X-Calls-Left", Reset: "X-Calls-Reset", ResetUnit: "minutes"}
	fmt.Println(m.Validate())
	// Output: rlheader: Mapping.ResetUnit "minutes" is not one of "", "s", "ms", "epoch_s", "epoch_ms", "iso8601"
}
