"""A real RTSP server on loopback for tests: GStreamer's gst-rtsp-server (Debian's python3-gi bindings)
serving a live test pattern as RTP/JPEG. Run with the system Python: /usr/bin/python3 rtsp_server.py PORT."""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main() -> None:
    port = sys.argv[1]
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    factory = GstRtspServer.RTSPMediaFactory()
    # a live pattern encoded as JPEG over RTP: plugins-base and plugins-good only
    factory.set_launch("( videotestsrc is-live=true pattern=ball ! video/x-raw,format=I420,width=640,height=360,framerate=30/1 "
                       "! jpegenc quality=85 ! rtpjpegpay name=pay0 pt=26 )")
    factory.set_shared(True)
    server.get_mount_points().add_factory("/live", factory)
    server.attach(None)
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
