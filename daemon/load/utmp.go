package load

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// The glibc utmp record on Linux (x86-64, arm64, and the 32-bit ABIs, which
// keep ut_session and ut_tv 32 bits wide so the file is shared): 384 bytes,
// in the machine's byte order.
const (
	UtmpRecordSize = 384

	utOffType    = 0   // int16 ut_type (+2 bytes padding)
	utOffPID     = 4   // int32 ut_pid
	utOffLine    = 8   // char ut_line[32]
	utOffID      = 40  // char ut_id[4]
	utOffUser    = 44  // char ut_user[32]
	utOffHost    = 76  // char ut_host[256]
	utOffSession = 336 // int32 ut_session (after ut_exit, 2 × int16)
	utOffTvSec   = 340 // int32 ut_tv.tv_sec
	utOffTvUsec  = 344 // int32 ut_tv.tv_usec

	utLineSize = 32
	utUserSize = 32
	utHostSize = 256
)

// Utmp record types (ut_type).
const (
	UtEmpty        = 0
	UtRunLevel     = 1
	UtBootTime     = 2
	UtNewTime      = 3
	UtOldTime      = 4
	UtInitProcess  = 5
	UtLoginProcess = 6
	UtUserProcess  = 7 // a logged-in user's session
	UtDeadProcess  = 8
	UtAccounting   = 9
)

// MaxUtmpSize bounds the utmp file Proc reads (42 000 records).
const MaxUtmpSize = 16 << 20

// UtmpRecord is one utmp entry, the fields dpvm uses.
type UtmpRecord struct {
	Type    int16
	PID     int32
	Line    string // terminal, e.g. "pts/0"
	ID      string
	User    string
	Host    string // remote host of a remote login, or ""
	Session int32
	Time    time.Time
}

// ParseUtmp decodes a utmp file's contents in byte order order (nil means
// the machine's). A trailing partial record (the file being appended to)
// is ignored; a record of unknown type is kept with its Type, so the
// caller decides. Strings end at the first NUL and may fill their field.
// ut_tv.tv_sec is read as unsigned (valid to 2106). It never fails on
// content, only on an input larger than MaxUtmpSize.
func ParseUtmp(data []byte, order binary.ByteOrder) ([]UtmpRecord, error) {
	if len(data) > MaxUtmpSize {
		return nil, fmt.Errorf("%w: utmp: %d bytes (at most %d)", ErrMalformed, len(data), MaxUtmpSize)
	}
	if order == nil {
		order = binary.NativeEndian
	}
	n := len(data) / UtmpRecordSize
	out := make([]UtmpRecord, 0, n)
	for i := 0; i < n; i++ {
		r := data[i*UtmpRecordSize : (i+1)*UtmpRecordSize]
		sec := int32(order.Uint32(r[utOffTvSec:]))
		usec := int32(order.Uint32(r[utOffTvUsec:]))
		if usec < 0 || usec >= 1e6 {
			usec = 0 // not a microsecond count: keep the second
		}
		out = append(out, UtmpRecord{
			Type:    int16(order.Uint16(r[utOffType:])),
			PID:     int32(order.Uint32(r[utOffPID:])),
			Line:    cString(r[utOffLine : utOffLine+utLineSize]),
			ID:      cString(r[utOffID : utOffID+4]),
			User:    cString(r[utOffUser : utOffUser+utUserSize]),
			Host:    cString(r[utOffHost : utOffHost+utHostSize]),
			Session: int32(order.Uint32(r[utOffSession:])),
			Time:    time.Unix(int64(uint32(sec)), int64(usec)*1e3).UTC(),
		})
	}
	return out, nil
}

// AppendUtmp appends r encoded as a utmp record in byte order order (nil
// means the machine's); strings longer than their field are cut. It writes
// the format ParseUtmp reads, for tools and tests that build utmp files.
func AppendUtmp(dst []byte, r UtmpRecord, order binary.ByteOrder) []byte {
	if order == nil {
		order = binary.NativeEndian
	}
	var b [UtmpRecordSize]byte
	order.PutUint16(b[utOffType:], uint16(r.Type))
	order.PutUint32(b[utOffPID:], uint32(r.PID))
	copy(b[utOffLine:utOffLine+utLineSize], r.Line)
	copy(b[utOffID:utOffID+4], r.ID)
	copy(b[utOffUser:utOffUser+utUserSize], r.User)
	copy(b[utOffHost:utOffHost+utHostSize], r.Host)
	order.PutUint32(b[utOffSession:], uint32(r.Session))
	if !r.Time.IsZero() {
		order.PutUint32(b[utOffTvSec:], uint32(r.Time.Unix()))
		order.PutUint32(b[utOffTvUsec:], uint32(r.Time.Nanosecond()/1e3))
	}
	return append(dst, b[:]...)
}

// InteractiveUsers counts the distinct user names among the USER_PROCESS
// records (logged-in sessions) — one user with three terminals is one
// interactive user — and returns the number of such sessions too.
func InteractiveUsers(recs []UtmpRecord) (users, sessions int) {
	seen := make(map[string]bool)
	for _, r := range recs {
		if r.Type != UtUserProcess || r.User == "" {
			continue
		}
		sessions++
		if !seen[r.User] {
			seen[r.User] = true
			users++
		}
	}
	return users, sessions
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
