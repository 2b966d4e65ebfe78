package phone

import (
	"net"
	"unsafe"

	"syscall"
)

// kernelLocal reports whether the kernel delivers packets for ip to this
// host: whether ip falls in a route of type local or anycast, which the
// kernel keeps in its local table. That covers more than the interface
// addresses: IPv6 subnet-router anycast addresses (present whenever IPv6
// forwarding is on), and "AnyIP" routes such as `ip route add local
// 10.0.0.0/8 dev lo`. Attack: a process of any user binds such an address
// with IP_FREEBIND and connects from it, so that its connection seems to
// come from another device. An error reading the table counts as local.
func kernelLocal(ip net.IP) bool {
	family, addr := syscall.AF_INET6, ip.To16()
	if v4 := ip.To4(); v4 != nil {
		family, addr = syscall.AF_INET, v4
	}
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETROUTE, family)
	if err != nil {
		return true
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return true
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type == syscall.NLMSG_DONE {
			break
		}
		if m.Header.Type == syscall.NLMSG_ERROR {
			return true
		}
		if m.Header.Type != syscall.RTM_NEWROUTE || len(m.Data) < syscall.SizeofRtMsg {
			continue
		}
		rt := (*syscall.RtMsg)(unsafe.Pointer(&m.Data[0]))
		if rt.Type != syscall.RTN_LOCAL && rt.Type != syscall.RTN_ANYCAST {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			return true
		}
		var dst net.IP
		for _, a := range attrs {
			if a.Attr.Type == syscall.RTA_DST {
				dst = net.IP(a.Value)
			}
		}
		if dst == nil || len(dst) != len(addr) {
			continue
		}
		n := net.IPNet{IP: dst, Mask: net.CIDRMask(int(rt.Dst_len), len(dst)*8)}
		if n.Contains(addr) {
			return true
		}
	}
	return false
}
