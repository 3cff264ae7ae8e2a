package soak

import (
	"fmt"
	"math"
)

// Trend is a line fitted by least squares to one figure's samples over the
// measured window, and whether it is flat.
type Trend struct {
	// First and Last are the fitted line's values at the window's start and
	// end; Mean is the samples' mean.
	First float64 `json:"first"`
	Last  float64 `json:"last"`
	Mean  float64 `json:"mean"`
	// PerHour is the line's slope, in the figure's unit per hour.
	PerHour float64 `json:"per_hour"`
	// Growth is Last - First: how much the figure grew over the window.
	Growth float64 `json:"growth"`
	// Allowed is the growth over the window still taken as flat: the larger of
	// the figure's floor and its share of the mean (see Limit).
	Allowed float64 `json:"allowed"`
	Flat    bool    `json:"flat"`
}

// Limit says how much a figure may grow over the measured window and still be
// flat: Share of its mean, or Floor in its unit, whichever is larger. A figure
// that holds thousands of pods' worth of state (the heap) is judged by its
// share; one that counts a few dozen things (sockets) by its floor, since one
// stream open at a sample's moment and not at another's is not a leak.
type Limit struct {
	Share float64
	Floor float64
}

// fit fits a line to the points (x in seconds, y) and judges it by limit. It
// needs two distinct x at least.
func fit(x, y []float64, limit Limit) (Trend, error) {
	if len(x) != len(y) || len(x) < 2 {
		return Trend{}, fmt.Errorf("fitting a line takes two samples at least, got %d", len(x))
	}
	n := float64(len(x))
	var sx, sy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx == 0 {
		return Trend{}, fmt.Errorf("fitting a line takes samples at two times at least")
	}
	slope := sxy / sxx // per second
	at := func(t float64) float64 { return my + slope*(t-mx) }
	t := Trend{First: at(x[0]), Last: at(x[len(x)-1]), Mean: my, PerHour: slope * 3600}
	t.Growth = t.Last - t.First
	t.Allowed = math.Max(limit.Floor, limit.Share*math.Abs(my))
	// Shrinking is never a leak: a cache that gives memory back is flat enough.
	t.Flat = t.Growth <= t.Allowed
	return t, nil
}
