package enqueuecli

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// lineReader splits JSON Lines input. A line longer than max is reported
// as too long (and skipped to its end) rather than buffered whole, so one
// runaway line cannot exhaust memory.
type lineReader struct {
	r   *bufio.Reader
	max int
	no  int   // number of the last line returned
	off int64 // bytes consumed
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line ending (LF or CRLF) and its
// 1-based number. tooLong reports a line over max (line is then nil). At
// the end of the input it returns io.EOF.
func (lr *lineReader) next() (line []byte, no int, tooLong bool, err error) {
	var buf []byte
	seen := false
	for {
		chunk, rerr := lr.r.ReadSlice('\n')
		lr.off += int64(len(chunk))
		if len(chunk) > 0 {
			seen = true
		}
		if !tooLong {
			if len(buf)+len(chunk) > lr.max+2 { // +2: the line ending
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(rerr, bufio.ErrBufferFull) {
			continue
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, lr.no, false, rerr
		}
		if rerr != nil && !seen {
			return nil, lr.no, false, io.EOF
		}
		lr.no++
		if tooLong {
			return nil, lr.no, true, nil
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if lr.no == 1 {
			buf = bytes.TrimPrefix(buf, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
		}
		if len(buf) > lr.max {
			return nil, lr.no, true, nil
		}
		return buf, lr.no, false, nil
	}
}
