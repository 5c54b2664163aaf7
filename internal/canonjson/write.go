package canonjson

import (
	"io"
	"sort"
	"unicode/utf8"
)

// WriteTo writes the canonical form of d to w and returns the number of
// bytes written. It writes through a buffer of at most 4 KiB, and writes long
// runs of a string's or a number's bytes straight from the text. The error is
// the first one w returned; WriteTo stops at it. WriteTo does not modify d: it
// may be called again, also concurrently.
func (d *Document) WriteTo(w io.Writer) (int64, error) {
	e := writer{doc: d, src: d.src, out: w}
	e.buf = make([]byte, 0, min(max(len(d.src), 64), 4096))
	e.run()
	e.flush()
	return e.n, e.err
}

// writer writes a checked text in canonical form.
type writer struct {
	doc *Document
	src []byte
	pos int
	out io.Writer
	buf []byte
	n   int64
	err error

	kinds  []byte      // kind of each open container, innermost last
	frames []permFrame // the open permuted objects, innermost last
}

// permFrame walks the members of a permuted object in canonical order.
type permFrame struct {
	next int32     // index in Document.perm of the current key, or -1 for a pair
	i    uint32    // the current key of pair
	pair [2]uint32 // for an object of two members, the key offsets in canonical order
	last uint32    // offset of the key of the member that comes last in the text
	end  uint32    // offset just after the value of that member, once written
}

func (f *permFrame) key(perm *blocks[uint32]) uint32 {
	if f.next < 0 {
		return f.pair[f.i]
	}
	return *perm.at(int(f.next)) &^ lastFlag
}

// advance moves to the next member, and reports false after the last one.
func (f *permFrame) advance(perm *blocks[uint32]) bool {
	if f.next < 0 {
		f.i++
		return int(f.i) < len(f.pair)
	}
	if *perm.at(int(f.next))&lastFlag != 0 {
		return false
	}
	f.next++
	return true
}

func (e *writer) run() {
	perm := &e.doc.perm
values:
	for e.err == nil {
		// A value starts at e.pos, maybe after white space.
		e.pos = skipSpace(e.src, e.pos)
		switch c := e.src[e.pos]; c {
		case '{':
			start := e.pos
			e.pos = skipSpace(e.src, e.pos+1)
			if e.src[e.pos] == '}' {
				e.pos++
				e.writeSmall("{}")
				break
			}
			e.writeSmall("{")
			if f, ok := e.permuted(start); ok {
				e.kinds = grow(e.kinds, kindPermuted)
				e.frames = grow(e.frames, f)
				e.pos = int(f.key(perm))
			} else {
				e.kinds = grow(e.kinds, kindObject)
			}
			e.key()
			continue values
		case '[':
			e.pos = skipSpace(e.src, e.pos+1)
			if e.src[e.pos] == ']' {
				e.pos++
				e.writeSmall("[]")
				break
			}
			e.writeSmall("[")
			e.kinds = grow(e.kinds, kindArray)
			continue values
		case '"':
			e.string()
		case 't':
			e.writeSmall("true")
			e.pos += len("true")
		case 'f':
			e.writeSmall("false")
			e.pos += len("false")
		case 'n':
			e.writeSmall("null")
			e.pos += len("null")
		default:
			n, end, _ := scanNumber(e.src, e.pos)
			e.writeNumber(n)
			e.pos = end
		}
		// A value ended at e.pos: close the containers that end here.
		for len(e.kinds) > 0 {
			switch e.kinds[len(e.kinds)-1] {
			case kindArray:
				e.pos = skipSpace(e.src, e.pos)
				e.pos++
				if e.src[e.pos-1] == ',' {
					e.writeSmall(",")
					continue values
				}
				e.writeSmall("]")
			case kindObject:
				e.pos = skipSpace(e.src, e.pos)
				e.pos++
				if e.src[e.pos-1] == ',' {
					e.writeSmall(",")
					e.pos = skipSpace(e.src, e.pos)
					e.key()
					continue values
				}
				e.writeSmall("}")
			case kindPermuted:
				f := &e.frames[len(e.frames)-1]
				if f.key(perm) == f.last {
					f.end = uint32(e.pos)
				}
				if f.advance(perm) {
					e.writeSmall(",")
					e.pos = int(f.key(perm))
					e.key()
					continue values
				}
				e.pos = skipSpace(e.src, int(f.end)) + 1 // }
				e.writeSmall("}")
				e.frames = e.frames[:len(e.frames)-1]
			}
			e.kinds = e.kinds[:len(e.kinds)-1]
		}
		return
	}
}

// permuted returns the frame for the object whose '{' is at start if its
// members are out of order; e.pos is at its first key.
func (e *writer) permuted(start int) (permFrame, bool) {
	objs := &e.doc.objs
	i := sort.Search(objs.n, func(i int) bool { return objs.at(i).start >= uint32(start) })
	if i == objs.n || objs.at(i).start != uint32(start) {
		return permFrame{}, false
	}
	if k := objs.at(i).keys; k&lastFlag != 0 {
		second := k &^ lastFlag
		return permFrame{next: -1, pair: [2]uint32{second, uint32(e.pos)}, last: second}, true
	}
	f := permFrame{next: int32(objs.at(i).keys)}
	for j := int(f.next); ; j++ {
		k := *e.doc.perm.at(j)
		f.last = max(f.last, k&^lastFlag)
		if k&lastFlag != 0 {
			return f, true
		}
	}
}

// key writes the object key at e.pos and the colon after it.
func (e *writer) key() {
	e.string()
	e.pos = skipSpace(e.src, e.pos) + 1 // :
	e.writeSmall(":")
}

// string writes the string whose opening quote is at e.pos, escaped
// minimally: only '"', '\\' and control characters are escaped, as \b, \f,
// \n, \r, \t or \u00xx.
func (e *writer) string() {
	e.pos++ // "
	e.writeSmall(`"`)
	run := e.pos // start of the bytes not yet written
	for {
		switch c := e.src[e.pos]; c {
		case '"':
			e.write(e.src[run:e.pos])
			e.pos++
			e.writeSmall(`"`)
			return
		case '\\':
			e.write(e.src[run:e.pos])
			r, n, _ := decodeEscape(e.src, e.pos)
			e.pos += n
			run = e.pos
			e.writeRune(r)
		default:
			e.pos++
		}
	}
}

const hexDigit = "0123456789abcdef"

func (e *writer) writeRune(r rune) {
	if r >= utf8.RuneSelf {
		e.reserve(utf8.UTFMax)
		e.buf = utf8.AppendRune(e.buf, r)
		return
	}
	switch r {
	case '"':
		e.writeSmall(`\"`)
	case '\\':
		e.writeSmall(`\\`)
	case '\b':
		e.writeSmall(`\b`)
	case '\f':
		e.writeSmall(`\f`)
	case '\n':
		e.writeSmall(`\n`)
	case '\r':
		e.writeSmall(`\r`)
	case '\t':
		e.writeSmall(`\t`)
	default:
		e.reserve(6)
		if r < 0x20 {
			e.buf = append(e.buf, '\\', 'u', '0', '0', hexDigit[r>>4], hexDigit[r&0xf])
		} else {
			e.buf = append(e.buf, byte(r))
		}
	}
}

// reserve makes room for n bytes in the buffer; n is at most 64.
func (e *writer) reserve(n int) {
	if len(e.buf)+n > cap(e.buf) {
		e.flush()
	}
}

// writeSmall buffers s, which is at most 64 bytes long.
func (e *writer) writeSmall(s string) {
	e.reserve(len(s))
	e.buf = append(e.buf, s...)
}

// write buffers p, or writes it straight to the output when it does not fit.
func (e *writer) write(p []byte) {
	if len(e.buf)+len(p) <= cap(e.buf) {
		e.buf = append(e.buf, p...)
		return
	}
	e.flush()
	if len(p) >= cap(e.buf) {
		e.emit(p)
		return
	}
	e.buf = append(e.buf, p...)
}

func (e *writer) flush() {
	if len(e.buf) > 0 {
		e.emit(e.buf)
		e.buf = e.buf[:0]
	}
}

func (e *writer) emit(p []byte) {
	if e.err != nil {
		return
	}
	n, err := e.out.Write(p)
	e.n += int64(n)
	e.err = err
}
