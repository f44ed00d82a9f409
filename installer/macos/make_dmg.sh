#!/usr/bin/env bash
# The macOS disk image: ShardChat.app beside a link to /Applications (drag to install).
#
#   installer/macos/make_dmg.sh [APP] [OUT_DIR]
#
# APP defaults to installer/build/dist/ShardChat.app, which installer/build.py makes with
# the same installer/shardchat.spec as Linux and Windows; the image goes to
# OUT_DIR/ShardChat-VERSION-macos-ARCH.dmg (OUT_DIR defaults to dist). Needs macOS
# (hdiutil): .github/workflows/installers.yml runs it on macos-latest. The app is signed
# ad hoc by PyInstaller, not notarised: the first start needs right-click > Open.
set -euo pipefail
cd "$(dirname "$0")/../.."

APP=${1:-installer/build/dist/ShardChat.app}
OUT=${2:-dist}
PYTHON=${PYTHON:-python3}
VERSION=$("$PYTHON" -c 'from importlib.metadata import version; print(version("shardchat"))')
ARCH=$(uname -m)
DMG="$OUT/ShardChat-$VERSION-macos-$ARCH.dmg"

[ -d "$APP" ] || { echo "no $APP: run python installer/build.py first" >&2; exit 2; }
mkdir -p "$OUT"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "ShardChat $VERSION" -srcfolder "$STAGE" -fs HFS+ \
    -format UDZO -imagekey zlib-level=9 -ov "$DMG"
echo "$DMG"
