#!/usr/bin/env bash
# Regenerates the seed corpora in corpus/<target>/ (small, valid inputs the
# fuzzers mutate). Needs qemu-img, sfdisk, genisoimage, mkfs.vfat/mtools,
# gzip/zstd/xz and python3 (ci/install-deps installs them). The committed
# corpora were made with it; re-running may change bytes (timestamps, UUIDs).
set -euo pipefail
cd "$(dirname "$0")"
out=$PWD/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"/{qcow2,decode,partition_table,gpt_relocate,iso9660,vfat,floppy,lldp,dhcp,cmdline,fetch_text,lookup,hints,exec_manifest,api_router,tls_read,container_steps_file,oci_layer_unpack,mdns_txt,metrics_config,pinned_cert,container_options,registry_auth_file}

# qcow2: a 1 MiB disk with a little data, several layouts.
python3 -c "
import sys
d = bytearray(1 << 20)
d[0:512] = b'\xab' * 512
d[70000:70100] = b'hello' * 20
d[(1 << 20) - 4096:] = bytes(range(256)) * 16
open('$tmp/raw.img', 'wb').write(d)
"
qemu-img convert -q -f raw -O qcow2 -o cluster_size=512 "$tmp/raw.img" "$out/qcow2/c512.qcow2"
qemu-img convert -q -f raw -O qcow2 -o cluster_size=4096,compat=0.10 "$tmp/raw.img" "$out/qcow2/v2-c4k.qcow2"
qemu-img convert -q -c -f raw -O qcow2 -o cluster_size=4096 "$tmp/raw.img" "$out/qcow2/deflate-c4k.qcow2"
qemu-img convert -q -c -f raw -O qcow2 -o cluster_size=4096,compression_type=zstd "$tmp/raw.img" "$out/qcow2/zstd-c4k.qcow2"
qemu-img convert -q -f raw -O qcow2 -o cluster_size=16384,extended_l2=on "$tmp/raw.img" "$out/qcow2/extl2-c16k.qcow2"
qemu-img create -q -f qcow2 -o cluster_size=512 "$out/qcow2/empty.qcow2" 64M

# decode: raw, each compression, qcow2 inside gzip, trailing data.
head -c 3000 "$tmp/raw.img" > "$out/decode/raw"
gzip -9 -c "$out/qcow2/c512.qcow2" > "$out/decode/qcow2.gz"
head -c 20000 "$tmp/raw.img" | gzip -c > "$out/decode/raw.gz"
head -c 20000 "$tmp/raw.img" | zstd -q -c > "$out/decode/raw.zst"
head -c 20000 "$tmp/raw.img" | xz -c > "$out/decode/raw.xz"
zstd -q -c "$out/qcow2/deflate-c4k.qcow2" > "$out/decode/qcow2.zst"
{ head -c 2000 "$tmp/raw.img" | gzip -c; echo trailing; } > "$out/decode/gz-trailing"
{ head -c 2000 "$tmp/raw.img" | gzip -c; head -c 100 "$tmp/raw.img" | gzip -c; } > "$out/decode/gz-members"

# partition_table / gpt_relocate: an MBR and a GPT made by sfdisk (512-byte
# sectors), and the same GPT laid out for 4096-byte sectors.
for label in gpt dos; do
    img=$tmp/$label.img
    truncate -s 96M "$img"
    printf 'label: %s\n,16M\n,16M\n' "$label" | sfdisk -q "$img" >/dev/null
done
python3 - "$tmp" "$out" <<'PY'
import struct, sys, zlib
tmp, out = sys.argv[1], sys.argv[2]
def gpt_4k(src):
    """The 512-byte-sector GPT in src, for 4096-byte sectors."""
    hdr, ents = src[512:604], bytearray(src[1024:1024 + 128 * 128])
    total = (96 << 20) // 4096
    for i in range(128):
        e = ents[i * 128:(i + 1) * 128]
        if any(e[:16]):
            first, last = struct.unpack_from('<QQ', e, 32)
            struct.pack_into('<QQ', ents, i * 128 + 32, first // 8, (last + 1) // 8 - 1)
    h = bytearray(hdr)
    struct.pack_into('<QQQQ', h, 24, 1, total - 1, 6, total - 6)
    struct.pack_into('<Q', h, 72, 2)
    struct.pack_into('<I', h, 88, zlib.crc32(ents))
    struct.pack_into('<I', h, 16, 0)
    struct.pack_into('<I', h, 16, zlib.crc32(h))
    mbr = bytearray(src[:512])
    struct.pack_into('<I', mbr, 446 + 12, total - 1)
    return bytes(mbr) + bytes(4096 - 512) + bytes(h) + bytes(4096 - 92) + bytes(ents)
heads = {}
for label in ('gpt', 'dos'):
    data = open(f'{tmp}/{label}.img', 'rb').read(34 * 512)
    heads[(label, 512)] = data
    heads[(label, 4096)] = gpt_4k(data) if label == 'gpt' else data + bytes(4096 * 6 - len(data))
for (label, ss), head in heads.items():
    flags = 0 if ss == 512 else 1
    for mib in (96, 200, 5000000):
        open(f'{out}/partition_table/{label}-{ss}-{mib}M', 'wb').write(bytes([flags]) + struct.pack('<I', mib) + head)
    if label == 'gpt':
        sectors = (96 << 20) // ss
        for extra in (0, 1 << 15):
            open(f'{out}/gpt_relocate/{ss}-plus{extra}', 'wb').write(bytes([flags]) + struct.pack('<Q', sectors + extra) + head)
PY

# iso9660: a config drive as Ironic builds it (genisoimage -J -r).
mkdir -p "$tmp/cd/openstack/latest" "$tmp/cd/ec2/latest"
echo '{"ignition": {"version": "3.2.0"}}' > "$tmp/cd/openstack/latest/user_data"
echo '{"uuid": "1"}' > "$tmp/cd/openstack/latest/meta_data.json"
echo '{}' > "$tmp/cd/ec2/latest/meta-data.json"
genisoimage -quiet -J -r -V config-2 -o "$out/iso9660/jr.iso" "$tmp/cd"
genisoimage -quiet -r -V config-2 -o "$out/iso9660/r.iso" "$tmp/cd"
genisoimage -quiet -V config-2 -o "$out/iso9660/plain.iso" "$tmp/cd"
# Without the zero padding at the end (what is read lies in front of it).
for f in "$out"/iso9660/*.iso; do
    python3 -c "
import sys
d = open(sys.argv[1], 'rb').read()
n = (len(d.rstrip(b'\\0')) + 2047) // 2048 * 2048
open(sys.argv[1], 'wb').write(d[:n])
" "$f"
done

# vfat: a small config drive with 512-byte sectors; the first byte picks the
# disk's sector size (1: 1024, 3: 4096).
for f in 1 3; do
    rm -f "$tmp/cd.vfat"
    mkfs.vfat -C -n CONFIG-2 "$tmp/cd.vfat" 128 >/dev/null
    MTOOLS_SKIP_CHECK=1 mcopy -s -i "$tmp/cd.vfat" "$tmp/cd/openstack" ::/
    { printf "\\x0$f"; cat "$tmp/cd.vfat"; } > "$out/vfat/drive-$f"
done

# floppy: Ironic's virtual floppy as its create_vfat_image makes it (100
# KiB, mkfs.vfat -n ir-vfd-dev, then parameters.txt copied in); the
# agent's unit tests (vmedia/floppy/tests.rs) read it too.
printf 'ipa-api-url=http://192.0.2.1:6385\nboot_method=vmedia\nipa-global-request-id=req-1' > "$tmp/parameters.txt"
dd if=/dev/zero of="$out/floppy/ironic-100k" bs=1KiB count=100 status=none
mkfs.vfat -n ir-vfd-dev "$out/floppy/ironic-100k" >/dev/null 2>&1
MTOOLS_SKIP_CHECK=1 mcopy -i "$out/floppy/ironic-100k" "$tmp/parameters.txt" ::/

python3 - "$out" <<'PY'
import json, struct, sys
out = sys.argv[1]
def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    open(f'{out}/{target}/{name}', 'wb').write(data)

# lldp: a switch's frame (chassis MAC, port name, TTL, system name, VLAN, MTU).
def tlv(t, v):
    return struct.pack('>H', (t << 9) | len(v)) + v
mac = bytes.fromhex('001122334455')
body = (tlv(1, b'\x04' + mac) + tlv(2, b'\x05Ethernet1/7') + tlv(3, b'\x00\x78')
        + tlv(5, b'switch-a') + tlv(4, b'uplink')
        + tlv(127, b'\x00\x80\xc2\x01\x00\x64') + tlv(127, b'\x00\x80\xc2\x03\x00\x64\x00\x04vl100')
        + tlv(127, b'\x00\x12\x0f\x04\x05\xdc') + tlv(8, b'\x05\x01\x0a\x00\x00\x01\x02\x00\x00\x00\x01\x00') + tlv(0, b''))
eth = bytes.fromhex('0180c200000e') + mac + b'\x88\xcc'
put('lldp', 'switch', eth + body)
put('lldp', 'vlan-tagged', bytes.fromhex('0180c200000e') + mac + b'\x81\x00\x00\x64\x88\xcc' + body)

# dhcp: an OFFER and an ACK (v4), an ADVERTISE and a REPLY (v6).
cmac = bytes.fromhex('525400123456')
def dhcp4(mtype):
    m = struct.pack('>BBBBIHH', 2, 1, 6, 0, 0x12345678, 0, 0)
    m += bytes([0] * 4) + bytes([10, 0, 0, 5]) + bytes([10, 0, 0, 1]) + bytes(4)
    m += cmac + bytes(10) + bytes(64) + bytes(128) + b'\x63\x82\x53\x63'
    opts = bytes([53, 1, mtype]) + bytes([54, 4, 10, 0, 0, 1]) + bytes([51, 4, 0, 0, 14, 16])
    opts += bytes([1, 4, 255, 255, 255, 0]) + bytes([3, 4, 10, 0, 0, 1]) + bytes([6, 8, 8, 8, 8, 8, 1, 1, 1, 1])
    opts += bytes([26, 2, 5, 220]) + bytes([15, 7]) + b'example' + bytes([255])
    return m + opts
put('dhcp', 'offer', b'\x00' + dhcp4(2))
put('dhcp', 'ack', b'\x02' + dhcp4(5))
def opt6(code, v):
    return struct.pack('>HH', code, len(v)) + v
duid = struct.pack('>HH', 3, 1) + cmac
def dhcp6(mtype, status=None):
    iaaddr = opt6(5, bytes.fromhex('20010db8000000000000000000000005') + struct.pack('>II', 3600, 7200))
    if status is not None:
        iaaddr = opt6(13, struct.pack('>H', status) + b'no addresses')
    iana = opt6(3, struct.pack('>III', 0x00123456, 1800, 2880) + iaaddr)
    m = bytes([mtype]) + b'\xab\xcd\xef' + opt6(1, duid) + opt6(2, struct.pack('>HH', 3, 1) + mac) + iana
    m += opt6(23, bytes.fromhex('20010db8000000000000000000000053'))
    return m
put('dhcp', 'advertise', b'\x01' + dhcp6(2))
put('dhcp', 'reply', b'\x03' + dhcp6(7))
put('dhcp', 'reply-noaddr', b'\x03' + dhcp6(7, status=2))

# cmdline
put('cmdline', 'ironic', 'BOOT_IMAGE=/vmlinuz ipa-api-url=http://10.0.0.1:6385,https://[fd00::1]:6385 BOOTIF=01-52-54-00-12-34-56 ipa-insecure=1 ipa-debug=1 nofb nomodeset console=ttyS0,115200n8')
put('cmdline', 'static', 'ip=10.0.0.5::10.0.0.1:255.255.255.0:node1:eth0:off:8.8.8.8:1.1.1.1 ipa-enable-vlan-interfaces=eth0.100,eth1,all ipa-lldp-timeout=30.5 ipa-api-url=mdns')
put('cmdline', 'quoted', 'a="b c" ipa-global-request-id="x=y" ipa-image-download-connection-retries=3 ipa-collect-lldp=true ipa-inspection-callback-url=http://x/v1/continue_inspection')

# fetch_text: 0 response head, 1 Content-Range, 2/3 checksum file + name
put('fetch_text', 'head', b'\x00HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\nContent-Range: bytes 100-199/1000\r\nETag: "abc"\r\n\r\n')
put('fetch_text', 'head-chunked', b'\x00HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n')
put('fetch_text', 'range', b'\x01bytes 0-1048575/8589934592')
sha = 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'
put('fetch_text', 'gnu', f'\x02{sha}  disk.img\n{sha} *images/other.img\n# comment\ndisk.img')
put('fetch_text', 'bsd', f'\x06SHA256 (disk.img) = {sha}\nhttp://x/y/disk.img')
put('fetch_text', 'single', f'\x03{sha}\nsha256')

# lookup: Ironic's answer
node = {"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "properties": {"root_device": {"size": ">= 20"}},
        "instance_info": {}, "driver_internal_info": {"agent_secret_token_pregenerated": True}}
cfg = {"heartbeat_timeout": 300, "metrics": {"backend": "noop"}, "agent_token": "t" * 43,
       "agent_token_required": True, "agent_md5_checksum_enable": False, "disable_deep_image_inspection": False,
       "permitted_image_formats": ["raw", "qcow2"], "agent_containers": {}}
put('lookup', 'ironic', json.dumps({"node": node, "config": cfg}))
put('lookup', 'masked', json.dumps({"node": {"uuid": "u"}, "config": {"agent_token": "******", "heartbeat_timeout": "60"}}))

# hints
for i, h in enumerate([{"size": ">= 20"}, {"serial": "<in> S1 S2", "rotational": False},
                       {"name": "s== /dev/sdb"}, {"wwn": "<or> 0x5000c500a1b2c3d4 <or> x", "size": "<= 50"},
                       {"model": "qemu", "hctl": "0:0:0:0", "by_path": "/dev/disk/by-path/pci-0000:00:05.0-sda"},
                       {"properties": {"root_device": {"size": 40}}}]):
    put('hints', f'h{i}', json.dumps(h))

# exec_manifest (parsed as if in /bin: `sh` is an executable there)
put('exec_manifest', 'full', """name: acme
version: '1.0'
support: 4
steps:
  - name: build_raid
    executable: sh
    args: [-c, 'echo {}']
    interface: raid
    clean_priority: 0
    deploy_priority: 60
    abortable: true
    timeout: 120
    argsinfo:
      level: {description: RAID level, required: true}
  - {name: flash, executable: /bin/sh, interface: firmware, service_priority: 10}
erase_block_device: {executable: sh, args: [-c, 'true'], timeout: 600}
inspect: {executable: sh}
""")
put('exec_manifest', 'minimal', "name: x\nversion: 2\n")
put('exec_manifest', 'refused', "name: x\nversion: '1'\nsteps:\n  - {name: s, executable: missing, interface: deploy, clean_priority: 1, colour: red}\n")

# api_router: [flags] METHOD \n URI \n headers \n\n body
put('api_router', 'root', b'\x00GET\n/\nhost: 10.0.0.5:9999\n\n')
put('api_router', 'commands', b'\x01GET\n/v1/commands/?wait=true\n\n')
put('api_router', 'command', b'\x01GET\n/v1/commands/abc?wait=true\n\n')
put('api_router', 'post-steps', b'\x01POST\n/v1/commands/\ncontent-type: application/json\n\n'
    + json.dumps({"name": "clean.get_clean_steps", "params": {"node": {"uuid": "n"}, "ports": []}}).encode())
put('api_router', 'post-bad', b'\x01POST\n/v1/commands/?wait=true\ncontent-length: 30\n\n'
    + json.dumps({"name": "standby.write_image", "params": {"image_info": {"urls": 1}}}).encode())
put('api_router', 'status', b'\x00PUT\n/v1/status\n\n')

# tls_read: [flags: bit 0 TLS 1.3, bit 1 small handshake reads of flags >> 2
# bytes][client read size u16][script] (src/tls_peer.rs): ops 0/1 data
# (u16 length), 2 close_notify, 3 KeyUpdate, 4 raw bytes (u8 length),
# 5 flip a byte (u16 offset), 6 cut after (u16) bytes, 7 socket chunk (u16).
def data(n): return b'\x00' + struct.pack('>H', n)
CLOSE, KEYUPDATE = b'\x02', b'\x03'
def raw(b): return b'\x04' + bytes([len(b)]) + b
def flip(o): return b'\x05' + struct.pack('>H', o)
def cut(n): return b'\x06' + struct.pack('>H', n)
def chunk(n): return b'\x07' + struct.pack('>H', n)
big = struct.pack('>H', 1 << 14)
for v, name in ((1, 'tls13'), (0, 'tls12')):
    put('tls_read', f'{name}-body', bytes([v]) + big + data(30000) + data(1000) + CLOSE)
    put('tls_read', f'{name}-no-close', bytes([v]) + big + data(20000))
    put('tls_read', f'{name}-flip', bytes([v]) + big + data(20000) + flip(100) + data(20000) + CLOSE)
    put('tls_read', f'{name}-cut', bytes([v]) + big + cut(20000) + data(30000))
    put('tls_read', f'{name}-raw', bytes([v]) + big + data(100) + raw(bytes([23, 3, 3, 0, 5, 1, 2, 3, 4, 5])) + data(100) + CLOSE)
    put('tls_read', f'{name}-small-reads', bytes([v | 2 | (3 << 2)]) + struct.pack('>H', 7) + data(3000) + chunk(5) + data(100) + CLOSE)
    put('tls_read', f'{name}-oversized', bytes([v]) + big + data(10) + raw(bytes([23, 3, 3, 0x48, 0x01])) + cut(0))
put('tls_read', 'tls13-keyupdate', b'\x01' + big + data(5000) + KEYUPDATE + data(5000) + CLOSE)
# A harness finding (its read bound was fixed, 1,000,000): 1 MiB read a
# byte at a time.
put('tls_read', 'tls12-one-byte-reads', b'\x00\x00\x00' + data(15) + data(37265) * 28)
PY
find "$out" -type f | wc -l
du -sh "$out"

# container_steps_file: a good steps file, and each shape IPA refuses.
cs=$out/container_steps_file
cat > "$cs/good.yaml" <<'YAML'
steps:
  - name: write_marker
    image: docker://127.0.0.1:5000/tool:1
    priority: 30
    interface: deploy
    reboot_requested: false
    abortable: true
    pull_options: --tls-verify=false --creds u:p
    run_options: [--rm, --network=host, --device /dev/loop7, "-v /a:/b:ro", -e K=V]
YAML
printf 'steps:\n  - name: s\n    image: a\n    priority: 1\n' > "$cs/missing-keys.yaml"
printf -- '- a\n- b\n' > "$cs/not-a-mapping.yaml"
printf 'steps: [x, {image: a}]\n' > "$cs/bad-steps.yaml"

# oci_layer_unpack: ordinary layers (plain, gzip, zstd), one with a
# whiteout and links, and the hostile shapes (.., absolute, a link then a
# path through it, a hard link out).
python3 - "$out/oci_layer_unpack" <<'PY'
import io, sys, tarfile, gzip
d = sys.argv[1]
def layer(name, members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w', format=tarfile.GNU_FORMAT) as t:
        for m in members:
            kind, path = m[0], m[1]
            i = tarfile.TarInfo(path)
            if kind == 'f':
                data = m[2]
                i.size = len(data)
                t.addfile(i, io.BytesIO(data))
                continue
            if kind == 'd':
                i.type = tarfile.DIRTYPE
            elif kind == 's':
                i.type, i.linkname = tarfile.SYMTYPE, m[2]
            elif kind == 'h':
                i.type, i.linkname = tarfile.LNKTYPE, m[2]
            t.addfile(i)
    open(f'{d}/{name}', 'wb').write(buf.getvalue())
    return buf.getvalue()
plain = layer('plain.tar', [('d', 'bin/'), ('f', 'bin/busybox', b'ELF' * 100), ('s', 'bin/sh', 'busybox'), ('h', 'bin/ls', 'bin/busybox')])
open(f'{d}/plain.tar.gz', 'wb').write(gzip.compress(plain))
layer('whiteouts.tar', [('f', 'etc/a', b'1'), ('f', 'etc/.wh..wh..opq', b''), ('f', '.wh.gone', b'')])
layer('dotdot.tar', [('f', '../escape', b'x')])
layer('absolute.tar', [('f', '/etc/escape', b'x')])
layer('link-then-path.tar', [('s', 'a', '/'), ('f', 'a/etc/passwd', b'x')])
layer('hardlink-out.tar', [('h', 'h', '/etc/shadow')])
PY
zstd -q -c "$out/oci_layer_unpack/plain.tar" > "$out/oci_layer_unpack/plain.tar.zst"


# mdns_txt: [port u16][n addresses][kind, address]...[host\0][k=v\0]...
python3 - "$out/mdns_txt" <<'PY'
import struct, sys, ipaddress
d = sys.argv[1]
def advert(name, port, addrs, host, txt):
    b = struct.pack('>HB', port, len(addrs))
    for a in addrs:
        ip = ipaddress.ip_address(a)
        b += bytes([0 if ip.version == 4 else 1]) + ip.packed
    b += '\0'.join([host] + [f'{k}={v}' for k, v in txt]).encode()
    open(f'{d}/{name}', 'wb').write(b)
advert('local', 6385, ['127.0.0.1', '192.0.2.5', 'fd00::5'], 'conductor.local.',
       [('protocol', 'http'), ('path', '/baremetal'), ('ipa_ntp_server', '192.0.2.1'),
        ('ipa_inspection_callback_url', 'http://192.0.2.5:5050/v1/continue'), ('ipa_debug', '1')])
advert('named', 443, [], 'ironic.example.com.', [('path', '')])
PY

# metrics_config: INI \0 lookup config JSON \0 hostname
printf '[metrics]\nbackend = statsd\nprepend_host = true\nglobal_prefix = ipa\n[metrics_statsd]\nstatsd_host = 192.0.2.7\nstatsd_port = 8125\n\0{"metrics": {"backend": "statsd", "prepend_host_reverse": false}, "metrics_statsd": {"statsd_port": "9125"}}\0node1.rack.example' > "$out/metrics_config/file-and-lookup"
printf '[metrics]\nbackend = noop\n\0{"metrics": {"backend": "statsd"}, "metrics_statsd": {"statsd_host": "::1"}}\0h' > "$out/metrics_config/lookup-wins"

# pinned_cert: [now u32 since 2000][PEM]: a self-signed CA:TRUE certificate
# as Ironic's documentation makes one, and a chain of a CA and a server's.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/k.pem" -out "$tmp/self.pem" \
    -days 3650 -subj /CN=ironic.example 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/ca.key" \
    -out "$tmp/ca.pem" -days 3650 -subj /CN=test-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/srv.key" \
    -out "$tmp/srv.csr" -subj /CN=ironic.example 2>/dev/null
printf 'subjectAltName=DNS:ironic.example,IP:192.0.2.1\n' > "$tmp/ext"
openssl x509 -req -in "$tmp/srv.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial \
    -days 365 -extfile "$tmp/ext" -out "$tmp/srv.pem" 2>/dev/null
now=$(( $(date +%s) - 946684800 ))
{ python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('>I', $now))"; cat "$tmp/self.pem"; } > "$out/pinned_cert/self-signed"
{ python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('>I', $now))"; cat "$tmp/ca.pem" "$tmp/srv.pem"; } > "$out/pinned_cert/ca-and-server"

# container_options: podman's words, one a line (pull and run options).
co=$out/container_options
printf -- '--tls-verify=false\n--creds\nu:p' > "$co/pull-creds"
printf -- '--authfile\n/etc/auth.json\n--tls-verify' > "$co/pull-authfile"
printf -- '--rm\n--network=host\n--device\n/dev/sda:/dev/target:rw\n-v\n/a:/b:ro\n-e\nK=V\n--privileged=false' > "$co/run-all"
printf -- '--volume=/a:../b\n--pid=host' > "$co/run-refused"

# registry_auth_file: registry, repository, then containers-auth.json.
ra=$out/registry_auth_file
printf 'r.example:5000\nteam/tool\n{"auths": {"r.example:5000": {"auth": "cmVnOjE="}, "https://r.example:5000/team": {"auth": "dGVhbTpwdw=="}}}' > "$ra/namespace"
printf 'r.example\ntool\n{"auths": {"r.example": {"identitytoken": "t"}}}' > "$ra/token-only"
printf 'r.example\ntool\n{"auths": {"r.example": {"auth": "!!"}}}' > "$ra/bad-base64"
