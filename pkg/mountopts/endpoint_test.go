package mountopts

import (
	"strings"
	"testing"
)

func TestSessionEndpoint(t *testing.T) {
	for opts, want := range map[string]string{
		"rw,relatime,vers=4.2,rsize=1048576,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.2.15,local_lock=none,addr=10.0.2.2": "10.0.2.2:2049",
		"rw,vers=4.1,proto=tcp6,port=20490,sec=sys,addr=fd00::2":                                                                           "[fd00::2]:20490",
		"rw,vers=4.1,proto=tcp,port=0,sec=sys,addr=127.0.0.1":                                                                              "127.0.0.1:2049",
		"rw,vers=4.0,proto=tcp,sec=sys,addr=127.0.0.1":                                                                                     "",
		"rw,vers=3,proto=tcp,sec=sys,addr=127.0.0.1":                                                                                       "",
		"rw,vers=4.2,proto=rdma,sec=sys,addr=127.0.0.1":                                                                                    "",
		"rw,vers=4.2,proto=tcp,sec=krb5p,addr=127.0.0.1":                                                                                   "",
		"rw,vers=4.2,proto=tcp,sec=sys,addr=server.example":                                                                                "",
		"rw,vers=4.2,proto=tcp,port=70000,sec=sys,addr=127.0.0.1":                                                                          "",
	} {
		got, why := SessionEndpoint(strings.Split(opts, ","))
		if got != want || (got == "") == (why == "") {
			t.Errorf("%s: %q (%s), want %q", opts, got, why, want)
		}
	}
}
