# RetinaNet + MAViT to ONNX Runtime, static input (the shape of the image
# given to mmdeploy's deploy.py after the model's test pipeline).
_base_ = ['./_base_/onnxruntime_opset11.py', './_base_/detection_post_processing.py']
onnx_config = dict(output_names=['dets', 'labels'])
