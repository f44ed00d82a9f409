"""One rule for the Linux libraries a bundle takes from the system, whatever the build machine has.

PyInstaller carries every library a binary links unless its own exclude list
names it, so what a bundle carried depended on what the build machine happened
to have installed: with the xcb utility libraries installed (any desktop,
GitHub's runners) it carried libxcb-icccm.so.4 and its siblings, and the .deb's
Depends then left them out. The rule here is applied the same everywhere: the
libraries below are never carried (the spec drops them from the bundle) and are
always named in the .deb's Depends (build_deb.py), or in its Recommends where
only an optional backend module needs them (libvulkan1: without the Vulkan
loader ShardChat runs on the CPU). GPU driver libraries are named nowhere: they
come with the driver, which no package dependency can choose.
"""

from __future__ import annotations

import re

# display and GPU stacks: they must match the system's X/Wayland server and drivers
SYSTEM = re.compile(
    r"^lib(xcb[-.]|xcb\.|X11|Xau|Xdmcp|GL|EGL|OpenGL|GLX|GLdispatch|drm|gbm|wayland-|vulkan)"
)
# the GPU drivers' own libraries (NVIDIA's libcuda, libnvidia-*): never carried, never named
DRIVER = re.compile(r"^lib(cuda\.|nvidia-)")
# backend modules whose system libraries are a recommendation: the app runs without them
OPTIONAL_MODULES = re.compile(r"^libggml-(vulkan|cuda)\.so$")


# a wheel's private copy, renamed by auditwheel (pillow.libs/libxcb-9065bb12.so.1.1.0): it
# belongs to that wheel's own extension, not to the system's display stack
WHEEL_PRIVATE = re.compile(r"-[0-9a-f]{8}\.so")


def from_system(soname: str) -> bool:
    """A library the bundle must not carry: the system's (or the GPU driver's) copy is used."""
    name = soname.rsplit("/", 1)[-1]
    if WHEEL_PRIVATE.search(name):
        return False
    return SYSTEM.match(name) is not None or DRIVER.match(name) is not None


def is_driver(soname: str) -> bool:
    return DRIVER.match(soname) is not None


def is_optional_module(file_name: str) -> bool:
    return OPTIONAL_MODULES.match(file_name) is not None
