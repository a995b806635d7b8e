"""The image benchmark's IPA side: ironic-python-agent 13.0.0's own
standby extension writes an image to a device (`prepare_image`, the path
`write_image` takes in IPA), with only the root-device lookup stubbed, and,
where this machine hides PID 1's file descriptors (containers), the fuser
in-use check: fuser then fails on /proc/1/fd and IPA would refuse a device
nothing holds. In a ramdisk that check takes milliseconds. Likewise
`udevadm settle` succeeds at once where this machine has no udevadm (no
udevd runs here to wait for).

usage: ipa_write.py IMAGE_INFO_JSON DEVICE   (prints one JSON line)
"""
import json
import sys
import time

import ironic_python_agent.config  # noqa: F401  registers IPA's options
import os
import shutil

from ironic_python_agent import disk_utils
from ironic_python_agent import hardware
from ironic_python_agent import utils
from ironic_python_agent.extensions import standby
from oslo_config import cfg

info = json.loads(sys.argv[1])
device = sys.argv[2]
cfg.CONF([], project='ironic-python-agent')


def dispatch(method, *args, **kwargs):
    if method == 'get_os_install_device':
        return device
    raise RuntimeError('bench harness: %s is not stubbed' % method)


hardware.dispatch_to_managers = dispatch
try:
    os.stat('/proc/1/fd/0')
except PermissionError:
    disk_utils.wait_for_disk_to_become_available = lambda device: None
if shutil.which('udevadm') is None:
    execute = utils.execute

    def execute_without_udevadm(*cmd, **kwargs):
        if cmd[:2] == ('udevadm', 'settle'):
            return '', ''
        return execute(*cmd, **kwargs)

    utils.execute = execute_without_udevadm
start = time.monotonic()
result = standby.StandbyExtension().prepare_image(image_info=info)
result.join()
print(json.dumps({'status': result.command_status,
                  'error': str(result.command_error or ''),
                  'secs': time.monotonic() - start}))
