package tcpfault

import "time"

// SetNow replaces the proxy's clock (CutFor's deadline).
func SetNow(p *Proxy, now func() time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timeNowFunc = now
}
