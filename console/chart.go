package console

import (
	"fmt"
	"time"

	"github.com/sqsonce/sqsonce/ledger"
)

// chart is the overview's bar chart of completions and failures per
// minute, laid out here and drawn by the template as SVG: no script.
type chart struct {
	Width, Height   int // of the drawing area, in SVG units
	Left, Top       int // margins
	Bars            []bar
	Ticks           []tick
	YTicks          []tick
	Max             int
	Completed       int
	Failed          int
	Start, End      time.Time
	ViewW, ViewH    int
	BaseY           int
	LegendY, Legend int
}

// bar is one minute: a completions rectangle with a failures one on top.
type bar struct {
	X, W              int
	CompY, CompH      int
	FailY, FailH      int
	Completed, Failed int
	Title             string
}

// tick is a label of an axis.
type tick struct {
	X, Y  int
	Label string
}

// newChart lays out the activity of the window that ends at now, a bar
// per minute.
func newChart(activity []ledger.Minute, now time.Time, window time.Duration) chart {
	minutes := int(window / time.Minute)
	end := now.Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-time.Duration(minutes) * time.Minute)
	c := chart{Width: 720, Height: 160, Left: 48, Top: 10, Start: start, End: end}
	c.ViewW, c.ViewH = c.Left+c.Width+10, c.Top+c.Height+44
	c.BaseY = c.Top + c.Height
	c.LegendY = c.BaseY + 38
	counts := make([][2]int, minutes)
	for _, m := range activity {
		i := int(m.Start.Sub(start) / time.Minute)
		if i < 0 || i >= minutes {
			continue
		}
		counts[i][0] += m.Completed
		counts[i][1] += m.Failed
	}
	for _, n := range counts {
		c.Max = max(c.Max, n[0]+n[1])
		c.Completed += n[0]
		c.Failed += n[1]
	}
	top := niceCeil(max(c.Max, 1))
	slot := c.Width / minutes
	for i, n := range counts {
		x := c.Left + i*slot
		ch := n[0] * c.Height / top
		fh := n[1] * c.Height / top
		if n[0] > 0 && ch == 0 {
			ch = 1
		}
		if n[1] > 0 && fh == 0 {
			fh = 1
		}
		t := start.Add(time.Duration(i) * time.Minute).UTC()
		c.Bars = append(c.Bars, bar{
			X: x + 1, W: max(slot-2, 1),
			CompY: c.BaseY - ch, CompH: ch,
			FailY: c.BaseY - ch - fh, FailH: fh,
			Completed: n[0], Failed: n[1],
			Title: fmt.Sprintf("%s UTC: %d completed, %d failed", t.Format("15:04"), n[0], n[1]),
		})
	}
	step := 15
	if minutes > 60 {
		step = 30
	}
	for i := 0; i <= minutes; i += step {
		label := fmt.Sprintf("−%dm", minutes-i)
		if i == minutes {
			label = "now"
		}
		c.Ticks = append(c.Ticks, tick{X: c.Left + i*slot, Y: c.BaseY + 16, Label: label})
	}
	for _, v := range []int{0, top / 2, top} {
		c.YTicks = append(c.YTicks, tick{X: c.Left - 6, Y: c.BaseY - v*c.Height/top + 4, Label: fmt.Sprint(v)})
	}
	return c
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten.
func niceCeil(n int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}
