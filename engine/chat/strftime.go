package chat

import (
	"fmt"
	"strings"
	"time"
)

// strftime formats t as Python's time.strftime does for the directives chat
// templates use (C locale). Unknown directives are copied as they are.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		d := format[i]
		if d == '-' && i+1 < len(format) { // glibc's no-padding flag: %-d
			i++
			d = format[i]
			v := strings.TrimLeft(directive(d, t), "0 ")
			if v == "" {
				v = "0"
			}
			b.WriteString(v)
			continue
		}
		b.WriteString(directive(d, t))
	}
	return b.String()
}

func directive(d byte, t time.Time) string {
	switch d {
	case 'Y':
		return fmt.Sprintf("%d", t.Year())
	case 'y':
		return fmt.Sprintf("%02d", t.Year()%100)
	case 'm':
		return fmt.Sprintf("%02d", int(t.Month()))
	case 'd':
		return fmt.Sprintf("%02d", t.Day())
	case 'e':
		return fmt.Sprintf("%2d", t.Day())
	case 'j':
		return fmt.Sprintf("%03d", t.YearDay())
	case 'H':
		return fmt.Sprintf("%02d", t.Hour())
	case 'I':
		h := t.Hour() % 12
		if h == 0 {
			h = 12
		}
		return fmt.Sprintf("%02d", h)
	case 'M':
		return fmt.Sprintf("%02d", t.Minute())
	case 'S':
		return fmt.Sprintf("%02d", t.Second())
	case 'f':
		return fmt.Sprintf("%06d", t.Nanosecond()/1000)
	case 'p':
		if t.Hour() < 12 {
			return "AM"
		}
		return "PM"
	case 'B':
		return t.Month().String()
	case 'b', 'h':
		return t.Month().String()[:3]
	case 'A':
		return t.Weekday().String()
	case 'a':
		return t.Weekday().String()[:3]
	case 'w':
		return fmt.Sprintf("%d", int(t.Weekday()))
	case 'Z':
		name, _ := t.Zone()
		return name
	case 'z':
		return t.Format("-0700")
	case 'F':
		return t.Format("2006-01-02")
	case 'T':
		return t.Format("15:04:05")
	case '%':
		return "%"
	}
	return "%" + string(d)
}
