"""ovserve serving runtime. Import-light: importing the package pulls in no openvino."""
